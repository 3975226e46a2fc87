"""The framework examples run offline against an in-process worker and finish."""

from __future__ import annotations

import pytest

from tests.integrations.support import run_child

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize(
    ("module", "expected"),
    [
        ("examples.pydantic_ai_agent", "done after"),
        ("examples.langgraph_agent", "ann is a customer"),
        ("examples.openai_agents_agent", "deleted ann-test"),
    ],
)
def test_example_runs(inproc, settings, module, expected):
    inproc.start(app="examples.frameworks_tools:registry")
    out = run_child(module, settings)
    assert "parked:" in out and expected in out, out
