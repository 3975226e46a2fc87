"""The framework examples run offline, each agent (Redis only) with a person who decides over
the real HTTP API, and workers that verify the API's signatures."""

from __future__ import annotations

import pytest

from tests.integrations.support import run_child

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize(
    ("module", "expected"),
    [
        ("examples.pydantic_ai_agent", "delete_user {'user': 'ann-test'} by alice: succeeded"),
        ("examples.langgraph_agent", "denied by alice: ann is a customer"),
        ("examples.openai_agents_agent", "deleted ann"),
    ],
)
def test_example_runs(approvers, settings, r, module, expected):
    approvers.start(app="examples.frameworks_tools:registry")
    out = run_child(module, settings, TOOLQ_API_URL=approvers.url, TOOLQ_APPROVER_TOKEN="alice-t")
    assert "parked:" in out and expected in out, out
    decided = [e for e in r.xrange("toolq:audit") if e[1][b"outcome"] in (b"approved", b"denied")]
    assert [e[1][b"by"] for e in decided] == [b"alice"], decided


def test_an_example_agent_holding_the_signing_key_is_refused(approvers, settings):
    approvers.start(app="examples.frameworks_tools:registry")
    with pytest.raises(AssertionError, match="TOOLQ_APPROVAL_SIGNING_KEY"):
        run_child(
            "examples.pydantic_ai_agent",
            settings,
            TOOLQ_API_URL=approvers.url,
            TOOLQ_APPROVER_TOKEN="alice-t",
            TOOLQ_APPROVAL_SIGNING_KEY=approvers.signing,
        )
