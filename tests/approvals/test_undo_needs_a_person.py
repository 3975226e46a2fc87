"""A gated tool's undo handler runs only with a person's signed approval of that undo.

The undo handler is the tool's own code, run on undo data any Redis writer can rewrite. A
worker with verify keys runs a gated tool's undo (DANGEROUS, or parked by the default
policy) only with a signature over the call and the undo data it passes
(``toolq.approvals.undoing``); and only a call that succeeded is undone. Each attack here
ran the handler before (found by an attack test).
"""

from __future__ import annotations

import json
import time

import pytest

from tests.approvals.conftest import Pair, deciding_client, start_verifying
from tests.approvals.test_worker_verification import call
from tests.conftest import make_settings
from toolq import CallStatus, Client
from toolq.errors import NotAuthorizedError, UndoError

pytestmark = pytest.mark.e2e


def agent_client() -> Client:
    """The agent: Redis credentials, no signing key."""
    from tests.apps import registry

    return Client(registry, make_settings())


def test_a_forged_undo_of_a_call_never_approved_runs_nothing(pair: Pair, inproc, r, tmp_path):
    """A Redis writer stores undo data for a parked (never approved) gated call and asks for
    its undo: refused before any message (not succeeded); with the record's status forged
    too, the worker refuses to run the handler (no signed approval of the undo)."""
    start_verifying(inproc, pair.verify)
    victim = tmp_path / "victim.txt"
    victim.write_text("original\n")
    forged = json.dumps({"path": str(victim), "before": "written by a Redis writer\n"})
    with agent_client() as agent:
        batch = agent.dispatch(
            call("edit_file", "e1", path=str(tmp_path / "harmless.txt"), content="hi"),
            principal="agent",
            run_id="run-a",
        )
        call_id = batch.call_ids[0]
        assert batch.calls[0].status is CallStatus.AWAITING_APPROVAL
        r.set(f"toolq:undo:{call_id}", forged)
        with pytest.raises(UndoError, match="only a call that succeeded"):
            agent.undo(call_id, timeout=30, principal="agent")
        r.hset(f"toolq:call:{call_id}", "status", "succeeded")  # the status forged as well
        with pytest.raises(UndoError, match=r"signed approval"):
            agent.undo(call_id, timeout=30, principal="agent")
        # and when an approver, shown nothing of the undo data, asks for the undo: the
        # call itself was never approved, so its effect is not undone
        with deciding_client(pair) as approver:
            r.hset(f"toolq:call:{call_id}", "undo_state", "failed")
            with pytest.raises(UndoError, match="its call was not approved"):
                approver.undo(call_id, timeout=30, approved_by="bob")
    assert victim.read_text() == "original\n"


def test_an_agent_cannot_undo_an_approved_dangerous_call_alone(pair: Pair, inproc, r):
    """A DANGEROUS call an approver let run is undone only when an approver asks: the
    agent's own undo (no signing key) is refused by the worker, an approver's is run, and
    undo data rewritten after the approver asked is refused."""
    start_verifying(inproc, pair.verify)
    with agent_client() as agent, deciding_client(pair) as approver:
        batch = agent.dispatch(
            call("deploy", "d1", service="api", replicas=2), principal="agent", run_id="run-b"
        )
        call_id = batch.call_ids[0]
        approver.approvals.approve(call_id, by="alice")
        assert batch.wait(timeout=30)[0].status is CallStatus.SUCCEEDED
        with pytest.raises(UndoError, match=r"signed approval"):  # the agent's own undo
            agent.undo(call_id, timeout=30, principal="agent")
        for process in (agent, approver):  # never signed for the call's submitter
            with pytest.raises(NotAuthorizedError, match="self"):
                process.undo(call_id, timeout=30, principal="agent", approved_by="agent")
        assert r.lrange("test:undo:deploy", 0, -1) == []

        # an approver's undo: signed over the undo data as it is; a Redis writer who
        # rewrites it after the approver asked (here: between the signature and the
        # request) has the undo refused
        genuine = r.get(f"toolq:undo:{call_id}")
        request = approver.undos.request

        def rewritten_then_requested(*args, **kwargs):
            r.set(f"toolq:undo:{call_id}", json.dumps({"call_id": "someone-else"}))
            return request(*args, **kwargs)

        approver.undos.request = rewritten_then_requested  # type: ignore[method-assign]
        with pytest.raises(UndoError, match="undo data changed"):
            approver.undo(call_id, timeout=30, principal="agent", admin=True, approved_by="bob")
        approver.undos.request = request  # type: ignore[method-assign]
        assert r.lrange("test:undo:deploy", 0, -1) == []
        # an approval is for one undo: the failed one's is gone, not there to replay
        assert r.hget(f"toolq:call:{call_id}", "undo_approval") is None
        r.set(f"toolq:undo:{call_id}", genuine)
        event = approver.undo(call_id, timeout=30, principal="agent", admin=True, approved_by="bob")
        assert event.type.value == "call.undone"
    assert r.lrange("test:undo:deploy", 0, -1) == [call_id.encode()]


def test_a_dangerous_undo_needs_as_many_approvers_as_its_calls(pair: Pair, inproc, r):
    """With ``TOOLQ_DANGEROUS_APPROVALS=2`` a DANGEROUS call runs only once two approvers
    approved it, and so is its undo now: one approver's request waits for a second one
    (nothing requested), the same approver twice counts once, and a Redis writer who
    requests the undo with one approver's signature has it refused by the worker (before,
    one approver undid the call alone)."""
    from toolq.errors import UndoAwaitingApprovalsError
    from toolq.models import RiskLevel

    start_verifying(inproc, pair.verify, dangerous_approvals=2)
    with agent_client() as agent, deciding_client(pair, dangerous_approvals=2) as approver:
        batch = agent.dispatch(
            call("deploy", "d2", service="api", replicas=3), principal="agent", run_id="run-q"
        )
        call_id = batch.call_ids[0]
        approver.approvals.approve(call_id, by="alice")
        approver.approvals.approve(call_id, by="bob")
        assert batch.wait(timeout=30)[0].status is CallStatus.SUCCEEDED
        record = f"toolq:call:{call_id}"
        for _ in range(2):  # carol alone, twice: one approver
            with pytest.raises(UndoAwaitingApprovalsError) as waiting:
                approver.undo(call_id, timeout=30, approved_by="carol")
            assert waiting.value.details == {
                "call_id": call_id,
                "approvers": ["carol"],
                "required": 2,
            }
        assert r.hget(record, "undo_state") is None  # nothing requested
        [carols] = json.loads(r.hget(record, "undo_votes"))
        # a Redis writer requests the undo with carol's approval alone
        queue, message = approver.publisher.undo_message(call_id, RiskLevel.DANGEROUS)
        assert approver.undos.request(call_id, queue, message, carols) == "ok"
        deadline = time.monotonic() + 30
        while r.hget(record, "undo_state") != b"failed":
            assert time.monotonic() < deadline, r.hget(record, "undo_state")
            time.sleep(0.05)
        [failed] = [e for e in agent.events("run-q") if e.type.value == "call.undo_failed"]
        assert "2 distinct approvers are needed" in failed.data["error"]
        assert r.lrange("test:undo:deploy", 0, -1) == []
        # carol and dave: undone, once
        with pytest.raises(UndoAwaitingApprovalsError):
            approver.undo(call_id, timeout=30, approved_by="carol")
        event = approver.undo(call_id, timeout=30, approved_by="dave")
        assert event.type.value == "call.undone"
        assert r.hget(record, "undo_votes") is None
    assert r.lrange("test:undo:deploy", 0, -1) == [call_id.encode()]


def test_a_replayed_undo_approval_is_refused_once_it_is_old(pair: Pair, inproc, r):
    """alice and bob approve the undo of a DANGEROUS call (quorum 2); its handler fails.
    Nobody asks again. A Redis writer who read the two signatures off the record requests
    the undo with them: signatures name no attempt, but an approval is good for
    ``TOOLQ_UNDO_APPROVAL_SECONDS`` only (2 s here): replayed later, the worker refuses it
    (before, it ran the handler again whenever the writer liked)."""
    from toolq.errors import UndoAwaitingApprovalsError
    from toolq.models import RiskLevel

    start_verifying(inproc, pair.verify, dangerous_approvals=2, undo_approval_seconds=2.0)
    with agent_client() as agent, deciding_client(pair, dangerous_approvals=2) as approver:
        batch = agent.dispatch(
            call("deploy", "d9", service="api", replicas=3), principal="agent", run_id="run-rp"
        )
        call_id = batch.call_ids[0]
        approver.approvals.approve(call_id, by="alice")
        approver.approvals.approve(call_id, by="bob")
        assert batch.wait(timeout=30)[0].status is CallStatus.SUCCEEDED
        record = f"toolq:call:{call_id}"
        copied: list[str] = []
        request = approver.undos.request

        def watched(call_id_, queue, message, approval=""):
            copied.append(approval)  # what any Redis reader sees on the record
            return request(call_id_, queue, message, approval)

        approver.undos.request = watched  # type: ignore[method-assign]
        r.set("test:undo:deploy", "not a list")  # the handler's rpush fails: WRONGTYPE
        with pytest.raises(UndoAwaitingApprovalsError):
            approver.undo(call_id, timeout=30, approved_by="alice")
        with pytest.raises(UndoError, match="WRONGTYPE"):
            approver.undo(call_id, timeout=30, approved_by="bob")
        r.delete("test:undo:deploy")
        [both] = copied
        time.sleep(2.5)  # the approvals' time is over
        queue, message = approver.publisher.undo_message(call_id, RiskLevel.DANGEROUS)
        assert request(call_id, queue, message, both) == "ok"
        deadline = time.monotonic() + 30
        while r.hget(record, "undo_state") != b"failed":
            assert time.monotonic() < deadline, r.hget(record, "undo_state")
            time.sleep(0.05)
        failed = [e for e in agent.events("run-rp") if e.type.value == "call.undo_failed"]
        assert "signed more than 2 s ago" in failed[-1].data["error"]
        assert r.lrange("test:undo:deploy", 0, -1) == []


def test_an_undo_approver_removed_since_they_asked_no_longer_counts(pair: Pair, inproc, r):
    """carol asks for the undo of a DANGEROUS call (quorum 2) and is then removed from
    TOOLQ_APPROVERS: dave's request is the first that counts (before, carol's waiting
    approval and dave's undid the call); erin's completes the quorum."""
    from toolq.errors import UndoAwaitingApprovalsError

    start_verifying(inproc, pair.verify, dangerous_approvals=2)
    names = ("alice", "bob", "carol", "dave", "erin")
    everyone = {who: ["dangerous"] for who in names}
    later = {who: ["dangerous"] for who in names if who != "carol"}
    with (
        agent_client() as agent,
        deciding_client(pair, dangerous_approvals=2, approvers=everyone) as approver,
    ):
        batch = agent.dispatch(
            call("deploy", "d10", service="api", replicas=3), principal="agent", run_id="run-rv"
        )
        call_id = batch.call_ids[0]
        approver.approvals.approve(call_id, by="alice")
        approver.approvals.approve(call_id, by="bob")
        assert batch.wait(timeout=30)[0].status is CallStatus.SUCCEEDED
        with pytest.raises(UndoAwaitingApprovalsError):
            approver.undo(call_id, timeout=30, approved_by="carol")
    with deciding_client(pair, dangerous_approvals=2, approvers=later) as approver:
        with pytest.raises(UndoAwaitingApprovalsError) as waiting:
            approver.undo(call_id, timeout=30, approved_by="dave")
        assert waiting.value.details["approvers"] == ["dave"]
        assert r.lrange("test:undo:deploy", 0, -1) == []
        event = approver.undo(call_id, timeout=30, approved_by="erin")
        assert event.type.value == "call.undone"
    assert r.lrange("test:undo:deploy", 0, -1) == [call_id.encode()]
