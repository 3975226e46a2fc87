"""Approvals (in-process worker): parking, racing deciders, deadlines, policy, audit, undo."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from tests.conftest import make_settings
from toolq import CallStatus, Client, EventType
from toolq.errors import (
    ApprovalExpiredError,
    DigestMismatchError,
    InvalidArgumentsError,
    NotAuthorizedError,
    NotAwaitingApprovalError,
    UndoError,
)

pytestmark = pytest.mark.e2e


def call(name: str, call_id: str = "c1", **arguments: object) -> list[dict[str, object]]:
    return [{"id": call_id, "name": name, "arguments": arguments}]


def executions(r, call_id: str) -> int:
    return int(r.llen(f"test:exec:{call_id}"))


def new_client(**overrides: object) -> Client:
    from tests.apps import registry

    return Client(registry, make_settings(**overrides))


def test_racing_approvers_give_exactly_one_execution(client, inproc, r):
    inproc.start(concurrency=4)
    trials, racers = 50, 8
    batch = client.dispatch(
        [{"id": f"w{i}", "name": "wipe", "arguments": {"target": str(i)}} for i in range(trials)],
        principal="agent",
    )
    assert all(c.status is CallStatus.AWAITING_APPROVAL for c in batch.calls)
    for call_id in batch.call_ids:
        barrier = threading.Barrier(racers)
        wins: list[str] = []
        losses: list[Exception] = []

        def race(who: str, call_id: str = call_id, barrier: threading.Barrier = barrier) -> None:
            barrier.wait()
            try:
                client.approvals.approve(call_id, by=who)
                wins.append(who)
            except NotAwaitingApprovalError as exc:
                losses.append(exc)

        threads = [threading.Thread(target=race, args=(f"approver-{n}",)) for n in range(racers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(wins) == 1 and len(losses) == racers - 1
    results = batch.wait(timeout=60)
    assert all(res.status is CallStatus.SUCCEEDED for res in results)
    assert [executions(r, c) for c in batch.call_ids] == [1] * trials
    approved = [e for e in client.events(batch.run_id) if e.type is EventType.APPROVED]
    assert len(approved) == trials


def test_deadline_approve_in_time_and_too_late(client, inproc, r):
    inproc.start()
    early = client.dispatch(call("hurry", "h1"))
    client.approvals.approve(early.call_ids[0], by="alice")  # well before the 1 s deadline
    assert early.wait(timeout=20)[0].status is CallStatus.SUCCEEDED
    late = client.dispatch(call("hurry", "h2"))
    time.sleep(1.2)
    with pytest.raises((ApprovalExpiredError, NotAwaitingApprovalError)):
        client.approvals.approve(late.call_ids[0], by="alice")
    [result] = late.wait(timeout=10)
    assert result.status is CallStatus.EXPIRED
    assert executions(r, late.call_ids[0]) == 0


def test_expiry_without_sweeper_happens_once_one_runs(client, inproc, r):
    batch = client.dispatch(call("hurry", "h3"))
    time.sleep(1.5)  # past the deadline, and no worker (so no sweeper) is running
    assert client.result(batch.call_ids[0]).status is CallStatus.AWAITING_APPROVAL
    inproc.start()
    [result] = batch.wait(timeout=10)
    assert result.status is CallStatus.EXPIRED
    assert "approval expired" in (result.error or "")
    messages = batch.to_messages("anthropic")
    assert messages[0]["content"][0]["is_error"] is True
    assert "approval expired" in str(messages[0]["content"][0]["content"]).lower()
    time.sleep(0.5)
    assert executions(r, batch.call_ids[0]) == 0
    outcomes = [(a.call_id, a.outcome) for a in client.approvals.audit()]
    assert (batch.call_ids[0], "expired") in outcomes


def test_pending_calls_survive_restart_of_every_process(inproc, r):
    first = new_client()
    inproc.start()
    batch = first.dispatch(
        call("wipe", "s1", target="prod") + call("wipe", "s2", target="dev"), run_id="restart-run"
    )
    first.close()
    inproc.stop_all()
    second = new_client()  # a new process: nothing in memory
    pending = second.approvals.pending(run_id="restart-run")
    assert {p.call_id for p in pending} == set(batch.call_ids)
    second.approvals.approve(batch.call_ids[0], by="alice")  # approved while no worker runs
    second.approvals.deny(batch.call_ids[1], by="alice", reason="dev is frozen")
    inproc.start()
    results = second.wait(batch.call_ids, timeout=20)
    assert [x.status for x in results] == [CallStatus.SUCCEEDED, CallStatus.DENIED]
    second.close()


def test_edited_arguments_run_and_invalid_ones_are_refused(client, inproc, r):
    inproc.start()
    batch = client.dispatch(call("wipe", "e1", target="production"))
    call_id = batch.call_ids[0]
    with pytest.raises(InvalidArgumentsError):
        client.approvals.approve(call_id, by="alice", arguments={"target": 42})
    with pytest.raises(InvalidArgumentsError):
        client.approvals.approve(call_id, by="alice", arguments={"nope": "x"})
    assert client.result(call_id).status is CallStatus.AWAITING_APPROVAL
    client.approvals.approve(call_id, by="alice", arguments={"target": "staging"})
    [result] = batch.wait(timeout=20)
    assert result.output == "wiped staging"
    shown = client.approvals.get(call_id)
    assert shown.arguments == {"target": "staging"}
    assert shown.original_arguments == {"target": "production"}


def test_digest_mismatch_is_refused(client, inproc):
    inproc.start()
    batch = client.dispatch(call("wipe", "d1", target="a"))
    call_id = batch.call_ids[0]
    shown = client.approvals.get(call_id)
    with pytest.raises(DigestMismatchError):
        client.approvals.approve(call_id, by="alice", digest="0" * 64)
    client.approvals.approve(call_id, by="alice", digest=shown.digest)
    assert batch.wait(timeout=20)[0].status is CallStatus.SUCCEEDED
    outcomes = [a.outcome for a in client.approvals.audit()]
    assert "refused:digest_mismatch" in outcomes and "approved" in outcomes


def test_self_approval_and_unauthorised_approvers_are_refused_and_audited(inproc, r):
    strict = new_client(approvers={"alice": ["safe", "moderate", "dangerous"], "bob": ["moderate"]})
    inproc.start()
    batch = strict.dispatch(call("wipe", "a1", target="x"), principal="alice")
    call_id = batch.call_ids[0]
    with pytest.raises(NotAuthorizedError, match="self approval"):
        strict.approvals.approve(call_id, by="alice")
    with pytest.raises(NotAuthorizedError, match="not allowed for dangerous"):
        strict.approvals.approve(call_id, by="bob")
    with pytest.raises(NotAuthorizedError, match="not an approver"):
        strict.approvals.deny(call_id, by="mallory", reason="x")
    assert strict.result(call_id).status is CallStatus.AWAITING_APPROVAL
    outcomes = [(a.by, a.outcome) for a in strict.approvals.audit()]
    assert ("alice", "refused:self_approval") in outcomes
    assert ("bob", "refused:not_allowed_for_dangerous") in outcomes
    assert ("mallory", "refused:not_an_approver") in outcomes
    strict.close()


def test_two_distinct_approvers_for_dangerous(inproc, r):
    two = new_client(dangerous_approvals=2)
    inproc.start()
    batch = two.dispatch(call("wipe", "t1", target="x"))
    call_id = batch.call_ids[0]
    two.approvals.approve(call_id, by="alice")
    assert two.result(call_id).status is CallStatus.AWAITING_APPROVAL
    with pytest.raises(NotAuthorizedError, match="second, distinct approver"):
        two.approvals.approve(call_id, by="alice")
    two.approvals.approve(call_id, by="bob")
    assert batch.wait(timeout=20)[0].status is CallStatus.SUCCEEDED
    assert two.approvals.get(call_id).approvals == ["alice", "bob"]
    two.close()


def test_denial_reason_reaches_the_model(client, inproc):
    batch = client.dispatch(call("wipe", "toolu_1", target="db"), format=None)
    client.approvals.deny(batch.call_ids[0], by="alice", reason="never touch the database")
    [result] = batch.wait(timeout=5)
    assert result.status is CallStatus.DENIED
    openai = batch.to_messages("openai")
    assert "never touch the database" in openai[0]["content"]
    anthropic = batch.to_messages("anthropic")
    block = anthropic[0]["content"][0]
    assert block["tool_use_id"] == "toolu_1" and block["is_error"] is True
    assert "never touch the database" in str(block["content"])


def test_decide_run_mixes_approvals_and_denials(client, inproc):
    inproc.start()
    batch = client.dispatch(
        call("wipe", "m1", target="a")
        + call("wipe", "m2", target="b")
        + call("wipe", "m3", target="c")
    )
    a, b, c = batch.call_ids
    outcomes = client.approvals.decide_run(batch.run_id, by="alice", approve=[a, c], deny={b: "no"})
    assert outcomes[a].status is CallStatus.QUEUED or outcomes[a].status.is_final
    results = batch.wait(timeout=20)
    assert [x.status for x in results] == [
        CallStatus.SUCCEEDED,
        CallStatus.DENIED,
        CallStatus.SUCCEEDED,
    ]
    again = client.approvals.decide_run(batch.run_id, by="alice", approve=[a])
    assert isinstance(again[a], NotAwaitingApprovalError)


def test_file_edit_preview_diff_and_undo(client, inproc, tmp_path: Path, wait_for):
    inproc.start()
    target = tmp_path / "notes.txt"
    target.write_text("hello\nworld\n")
    batch = client.dispatch(
        call("edit_file", "f1", path=str(target), content="hello\nthere\nworld\n")
    )
    call_id = batch.call_ids[0]
    wait_for(lambda: client.approvals.get(call_id).preview is not None, message="no preview")
    shown = client.approvals.get(call_id)
    assert shown.approval_metadata == {"warning": "overwrites the file"}
    assert shown.diff is not None and shown.diff["additions"] == 1
    assert "+there" in shown.diff["diff_output"]
    assert target.read_text() == "hello\nworld\n"  # nothing happened before approval
    client.approvals.approve(call_id, by="alice", digest=shown.digest)
    assert batch.wait(timeout=20)[0].status is CallStatus.SUCCEEDED
    assert target.read_text() == "hello\nthere\nworld\n"
    event = client.undo(call_id, timeout=20)
    assert event.type is EventType.UNDONE
    assert target.read_text() == "hello\nworld\n"
    with pytest.raises(UndoError, match="undone already"):
        client.undo(call_id)
    plain = client.dispatch(call("echo", "u2", text="x"))
    plain.wait(timeout=20)
    with pytest.raises(UndoError, match="nothing to undo"):
        client.undo(plain.call_ids[0])


def test_policy_modes_lists_and_sticky_decisions_survive_restart(inproc, r):
    inproc.start()
    first = new_client()
    first.approvals.set_rules("strict-run", mode="strict")
    first.approvals.set_rules("auto-run", mode="auto", by="alice")
    first.approvals.set_rules("list-run", approve_tools=["echo"])
    first.close()
    second = new_client()  # rules live in Redis, not in the process
    strict = second.dispatch(call("add", "p1", a=1, b=2), run_id="strict-run")
    assert strict.calls[0].status is CallStatus.AWAITING_APPROVAL
    auto = second.dispatch(call("wipe", "p2", target="x"), run_id="auto-run")
    assert auto.calls[0].status is CallStatus.QUEUED
    listed = second.dispatch(call("echo", "p3", text="y"), run_id="list-run")
    assert listed.calls[0].status is CallStatus.AWAITING_APPROVAL
    sticky = second.dispatch(call("wipe", "s1", target="1"), run_id="sticky-run")
    second.approvals.approve(sticky.call_ids[0], by="alice", always=True)
    denied = second.dispatch(call("login", "s2", user="u", password="pw"), run_id="sticky-run")
    second.approvals.deny(denied.call_ids[0], by="alice", reason="no logins", always=True)
    second.close()
    third = new_client()
    again = third.dispatch(
        call("wipe", "s3", target="2") + call("login", "s4", user="u", password="p"),
        run_id="sticky-run",
    )
    assert [c.status for c in again.calls] == [CallStatus.QUEUED, CallStatus.DENIED]
    state = third.approvals.export_state("sticky-run")
    assert state["always_approve"] == ["wipe"] and state["always_deny"] == ["login"]
    third.approvals.restore_state("copy-run", state, by="alice")
    copied = third.dispatch(call("wipe", "s5", target="3"), run_id="copy-run")
    assert copied.calls[0].status is CallStatus.QUEUED
    assert again.wait(timeout=20)[0].status is CallStatus.SUCCEEDED
    third.close()


def test_predicate_gating_and_secret_redaction(client, inproc, r):
    inproc.start()
    small = client.dispatch(call("transfer", "t1", amount=5))
    big = client.dispatch(call("transfer", "t2", amount=500))
    assert small.calls[0].status is CallStatus.QUEUED
    assert big.calls[0].status is CallStatus.AWAITING_APPROVAL
    secret = client.dispatch(call("login", "l1", user="ann", password="hunter2-sk-123"))
    shown = client.approvals.get(secret.call_ids[0])
    assert shown.arguments == {"user": "ann", "password": "**********"}
    client.approvals.approve(secret.call_ids[0], by="alice")
    [result] = secret.wait(timeout=20)
    assert result.output == "ann logged in with a 14-char password"
    for event in client.events(secret.run_id):
        assert "hunter2" not in event.model_dump_json()
    assert all(b"hunter2" not in v for v in r.xrange("toolq:audit") for v in v[1].values())


def test_gating_denies_with_readable_reasons(client, inproc):
    from tests.apps import registry

    batch = client.dispatch(call("publish", "g1", doc="d") + call("offline", "g2"), behavior="chat")
    assert [c.status for c in batch.calls] == [CallStatus.DENIED, CallStatus.DENIED]
    first, second = batch.results()
    assert "not allowed in behavior 'chat'" in (first.error or "")
    assert "not available" in (second.error or "")
    registry.disable_category("beta")
    try:
        off = client.dispatch(call("beta_feature", "g3"))
        assert off.calls[0].status is CallStatus.DENIED
        assert "disabled" in (off.results()[0].error or "")
    finally:
        registry.enable_category("beta")
    allowed = client.dispatch(call("publish", "g4", doc="d"), behavior="doc_edit")
    assert allowed.calls[0].status is CallStatus.QUEUED


def test_the_approving_decision_enqueues_the_call_in_the_same_step(client, inproc, r):
    batch = client.dispatch(call("wipe", "cr1", target="x"))
    call_id = batch.call_ids[0]
    assert r.llen("toolq.dangerous") == 0  # parked: no message yet
    store = client.approval_store
    store._run_decide(
        store._read(call_id), "approve", "alice", {"status": "queued", "by": "alice"}, None, "", None
    )
    # The decision and the message are one script: no window where an approved call has
    # no message, and nothing left for the sweeper to re-send.
    assert client.result(call_id).status is CallStatus.QUEUED
    assert r.llen("toolq.dangerous") == 1 and r.zcard("toolq:unsent") == 0
    inproc.start()
    [result] = batch.wait(timeout=30)
    assert result.status is CallStatus.SUCCEEDED
    assert executions(r, call_id) == 1
