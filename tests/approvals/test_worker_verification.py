"""Workers run a gated call only with a valid signed approval for exactly what they run.

Each test performs the attack for real: a plain Redis client (what anyone holding the Redis
password has) rewrites records, and a worker with TOOLQ_APPROVAL_VERIFY_KEYS (in-process:
the worker's own task code) must refuse. ``test:exec:<call_id>`` is the ground truth of
whether a handler ran.
"""

from __future__ import annotations

import json

import pytest

from tests.approvals.conftest import (
    Pair,
    audit_outcomes,
    deciding_client,
    executions,
    forge_queued,
    start_verifying,
)
from tests.cli.test_cli import toolq  # at import: see tests/conftest.py (CPython 3.11.7)
from toolq import CallStatus, EventType

pytestmark = pytest.mark.e2e


def call(name: str, call_id: str, **arguments: object) -> list[dict[str, object]]:
    return [{"id": call_id, "name": name, "arguments": arguments}]


def assert_refused(client, r, call_id: str, reason: str, *, approved: bool = False) -> None:
    [result] = client.wait([call_id], timeout=30)
    assert result.status is CallStatus.FAILED
    assert result.error_type == "approval_unverified"
    assert reason in (result.error or "")
    assert executions(r, call_id) == 0
    assert (call_id, "worker", "refused:approval_unverified") in audit_outcomes(r)
    run_id = client.store.run_id(call_id)
    types = [e.type for e in client.events(run_id) if e.call_id == call_id]
    assert EventType.SUCCEEDED not in types
    assert (EventType.APPROVED in types) is approved


def test_forged_queued_record_with_own_arguments_never_runs(approver, inproc, r, pair):
    start_verifying(inproc, pair.verify)
    batch = approver.dispatch(call("wipe", "f1", target="prod"), principal="agent")
    call_id = batch.call_ids[0]
    assert batch.calls[0].status is CallStatus.AWAITING_APPROVAL
    forge_queued(r, approver, call_id, arguments={"target": "FORGED-BY-REDIS"})
    assert_refused(approver, r, call_id, "carries no signed approval")
    # The sweeper re-sent it from the unsent set too: still nothing ran.
    assert executions(r, call_id) == 0


def test_arguments_rewritten_after_a_valid_approval_are_refused(approver, inproc, r, pair):
    batch = approver.dispatch(call("wipe", "f2", target="staging"), principal="agent")
    call_id = batch.call_ids[0]
    approver.approvals.approve(call_id, by="alice")  # no worker yet: the call waits queued
    key = f"toolq:call:{call_id}"
    envelope = json.loads(r.hget(key, "envelope"))
    envelope["arguments"] = {"target": "production"}
    r.hset(key, "envelope", json.dumps(envelope))
    start_verifying(inproc, pair.verify)
    assert_refused(approver, r, call_id, "arguments differ from the ones approved", approved=True)


def test_signature_replayed_from_another_call_is_refused(approver, inproc, r, pair):
    start_verifying(inproc, pair.verify)
    first = approver.dispatch(call("wipe", "f3", target="x"), principal="agent", run_id="rp")
    approver.approvals.approve(first.call_ids[0], by="alice")
    assert first.wait(timeout=30)[0].status is CallStatus.SUCCEEDED
    stolen = r.hget(f"toolq:call:{first.call_ids[0]}", "approval").decode()
    second = approver.dispatch(call("wipe", "f4", target="x"), principal="agent", run_id="rp")
    call_id = second.call_ids[0]
    forge_queued(r, approver, call_id, approval=stolen)
    assert_refused(approver, r, call_id, "belongs to another call")


def test_signature_by_an_unknown_key_is_refused(inproc, r, pair):
    start_verifying(inproc, pair.verify)
    with deciding_client(Pair()) as rogue:  # signs with a key the inproc do not trust
        batch = rogue.dispatch(call("wipe", "f5", target="x"), principal="agent")
        rogue.approvals.approve(batch.call_ids[0], by="alice")
        assert_refused(rogue, r, batch.call_ids[0], "not made by a trusted key", approved=True)


def test_forged_run_rules_do_not_let_a_gated_call_run(approver, inproc, r, pair):
    start_verifying(inproc, pair.verify)
    r.set("toolq:run:forged-always:settings", json.dumps({"always_approve": ["wipe"]}))
    r.set("toolq:run:forged-auto:settings", json.dumps({"mode": "auto"}))
    # A genuinely signed sticky rule, copied raw onto a third run.
    real = approver.dispatch(call("wipe", "f6", target="x"), principal="agent", run_id="real")
    approver.approvals.approve(real.call_ids[0], by="alice", always=True)
    r.set("toolq:run:copied:settings", r.get("toolq:run:real:settings"))
    refused = {
        "forged-always": "carries no signed approval",
        "forged-auto": "carries no signed approval",
        "copied": "belongs to another run",
    }
    for run_id, reason in refused.items():
        batch = approver.dispatch(
            call("wipe", f"g-{run_id}", target="x"), run_id=run_id, principal="agent"
        )
        assert batch.calls[0].status is CallStatus.QUEUED  # the dispatcher believed the rule
        assert_refused(approver, r, batch.call_ids[0], reason)


def test_properly_approved_calls_still_run(approver, inproc, r, pair):
    start_verifying(inproc, pair.verify)
    plain = approver.dispatch(call("wipe", "ok1", target="a"), principal="agent", run_id="ok")
    approver.approvals.approve(plain.call_ids[0], by="alice")
    edited = approver.dispatch(call("wipe", "ok2", target="prod"), principal="agent", run_id="ok")
    approver.approvals.approve(
        edited.call_ids[0], by="alice", arguments={"target": "staging"}, always=True
    )
    by_rule = approver.dispatch(call("wipe", "ok3", target="b"), principal="agent", run_id="ok")
    assert by_rule.calls[0].status is CallStatus.QUEUED
    approver.approvals.set_rules("auto", mode="auto", by="alice", principal="agent")
    auto = approver.dispatch(call("wipe", "ok4", target="c"), principal="agent", run_id="auto")
    assert auto.calls[0].status is CallStatus.QUEUED
    ungated = approver.dispatch(call("echo", "ok5", text="hi"), principal="agent")
    outputs = [b.wait(timeout=30)[0].output for b in (plain, edited, by_rule, auto, ungated)]
    assert outputs == ["wiped a", "wiped staging", "wiped b", "wiped c", {"text": "hi"}]
    for batch in (plain, edited, by_rule, auto):
        assert executions(r, batch.call_ids[0]) == 1


def test_rotation_accepts_either_key_and_refuses_a_retired_one(inproc, r):
    old, new, retired = Pair(), Pair(), Pair()
    inproc.start(approval_verify_keys=f"{old.verify},{new.verify}")
    ran = []
    for n, keys in enumerate((old, new)):
        with deciding_client(keys) as c:
            batch = c.dispatch(call("wipe", f"rot{n}", target=str(n)), principal="agent")
            c.approvals.approve(batch.call_ids[0], by="alice")
            ran.append(batch.wait(timeout=30)[0].status)
    assert ran == [CallStatus.SUCCEEDED, CallStatus.SUCCEEDED]
    with deciding_client(retired) as c:
        batch = c.dispatch(call("wipe", "rot-x", target="x"), principal="agent")
        c.approvals.approve(batch.call_ids[0], by="alice")
        assert_refused(c, r, batch.call_ids[0], "not made by a trusted key", approved=True)


def test_worker_without_verify_keys_warns_and_check_reports_it(
    approver, workers, r, tmp_path, wait_for
):

    log = tmp_path / "worker.log"
    workers.start("safe", log=log)
    wait_for(lambda: "has no TOOLQ_APPROVAL_VERIFY_KEYS" in log.read_text(), message="no warning")
    done = toolq("check", "--risk", "safe", settings=approver.settings)
    assert done.returncode == 0  # a warning, not unhealthy
    assert "does not verify signed approvals" in done.stderr


def test_sealed_secret_arguments_verify_as_stored(approver, inproc, r, pair):
    # Secrets are sealed in Redis: the digest covers the ciphertext, the predicate and the
    # handler see the plaintext. Plain and edited approvals (secret kept masked) still run.
    start_verifying(inproc, pair.verify)
    plain = approver.dispatch(
        call("login", "s1", user="ann", password="hunter2"), principal="agent"
    )
    stored = json.loads(r.hget(f"toolq:call:{plain.call_ids[0]}", "envelope"))
    assert "hunter2" not in json.dumps(stored)
    approver.approvals.approve(plain.call_ids[0], by="alice")
    edited = approver.dispatch(
        call("login", "s2", user="ann", password="hunter2"), principal="agent"
    )
    approver.approvals.approve(
        edited.call_ids[0], by="alice", arguments={"user": "bob", "password": "**********"}
    )
    assert plain.wait(timeout=30)[0].output == "ann logged in with a 7-char password"
    assert edited.wait(timeout=30)[0].output == "bob logged in with a 7-char password"
