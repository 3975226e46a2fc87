"""What every adapter stands on: no signing key in the agent, and a call id names one call."""

from __future__ import annotations

import pytest

from tests.conftest import make_settings
from tests.integrations.support import Approvers
from toolq import AsyncClient, CallStatus, Client
from toolq.dispatch.submission import Submission
from toolq.errors import CallIdConflictError, ConfigurationError
from toolq.integrations._bridge import Bridge
from toolq.integrations.langchain import toolq_tools
from toolq.integrations.openai_agents import ToolqAgentTools
from toolq.integrations.pydantic_ai import ToolqToolset
from toolq.signing import generate_pair

ADAPTERS = {
    "bridge": Bridge,
    "pydantic-ai": ToolqToolset,
    "openai-agents": ToolqAgentTools,
    "langgraph": toolq_tools,
}


def _bridge_of(made) -> Bridge:
    """The ``Bridge`` behind what an adapter's constructor made."""
    if isinstance(made, Bridge):
        return made
    return made[0]._bridge if isinstance(made, list) else made.bridge


@pytest.mark.parametrize("adapter", list(ADAPTERS))
@pytest.mark.parametrize("asynchronous", [False, True], ids=["Client", "AsyncClient"])
def test_an_adapter_dispatches_with_its_submission_whole(client, adapter, asynchronous):
    given = AsyncClient(client.registry, backend=client.backend) if asynchronous else client
    run = f"b-sub-{adapter}-{asynchronous}"
    submission = Submission(run_id=run, principal="agent-7", tenant="acme", behavior="ops")
    bridge = _bridge_of(ADAPTERS[adapter](given, submission=submission, principal="agent-8"))
    assert bridge.submit("t1", "echo", {"text": "hi"}).run_id == run
    summary = client.run(run)
    assert (summary.tenant, summary.owner) == ("acme", "agent-8")  # the keyword wins
    assert bridge.with_run(f"{run}-2").submission.tenant == "acme"
    with pytest.raises(ConfigurationError, match="idempotency_key"):
        ADAPTERS[adapter](given, submission=Submission(idempotency_key="k"))


@pytest.mark.parametrize("adapter", list(ADAPTERS))
@pytest.mark.parametrize("asynchronous", [False, True], ids=["Client", "AsyncClient"])
def test_an_agent_holding_the_signing_key_is_refused_at_start(r, adapter, asynchronous):
    from tests.apps import registry

    signing, _ = generate_pair()
    with Client(registry, make_settings(approval_signing_key=signing)) as keyed:
        given = AsyncClient(registry, backend=keyed.backend) if asynchronous else keyed
        with pytest.raises(ConfigurationError, match="TOOLQ_APPROVAL_SIGNING_KEY"):
            ADAPTERS[adapter](given)


def test_the_same_call_again_is_the_same_call(client):
    bridge = Bridge(client, run_id="b-same")
    first = bridge.submit("s1", "login", {"user": "ann", "password": "pw-1"})
    assert first.status is CallStatus.AWAITING_APPROVAL
    again = bridge.submit("s1", "login", {"user": "ann", "password": "pw-1"})
    assert again.call_id == first.call_id
    found = bridge.find("s1", "login", {"user": "ann", "password": "pw-1"})
    assert found is not None and found.call_id == first.call_id
    assert bridge.find("s2", "login", {"user": "ann", "password": "pw-1"}) is None


@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        ("echo", {"text": "ann"}),
        ("login", {"user": "bob", "password": "pw-1"}),
        ("login", {"user": "ann", "password": "pw-2"}),  # only the sealed secret differs
    ],
    ids=["other-tool", "other-argument", "other-secret"],
)
def test_an_id_that_names_another_call_is_a_conflict(client, r, name, arguments):
    bridge = Bridge(client, run_id="b-conflict")
    parked = bridge.submit("s1", "login", {"user": "ann", "password": "pw-1"})
    with pytest.raises(CallIdConflictError, match="already names another call"):
        bridge.submit("s1", name, arguments)
    with pytest.raises(CallIdConflictError):
        bridge.find("s1", name, arguments)
    assert [c.call_id for c in client.results("b-conflict")] == [parked.call_id]
    assert client.result(parked.call_id).status is CallStatus.AWAITING_APPROVAL


def test_after_an_approvers_edit_the_call_is_still_the_models(client, approvers: Approvers):
    approvers.start()
    bridge = Bridge(client, run_id="b-edit")
    parked = bridge.submit("w1", "wipe", {"target": "prod"})
    approvers.approve_shown("alice", parked.call_id, arguments={"target": "test"})
    again = bridge.submit("w1", "wipe", {"target": "prod"})  # the model's arguments, as resumed
    assert again.call_id == parked.call_id
    with pytest.raises(CallIdConflictError):
        bridge.submit("w1", "wipe", {"target": "test"})  # not what the model sent under w1


def test_a_failed_call_with_masked_secrets_is_found_again(client):
    bridge = Bridge(client, run_id="b-failed")
    bad = {"user": 7, "password": "pw-1"}  # invalid: stored failed, its secret masked
    failed = bridge.submit("f1", "login", bad)
    assert failed.status is CallStatus.FAILED
    assert bridge.submit("f1", "login", bad).call_id == failed.call_id
