"""DECIDE and EXPIRE: every outcome of a decision on a parked call, and of its expiry."""

from __future__ import annotations

import time
from typing import Any

import redis

from tests.results.conftest import KEYS, MESSAGE, QUEUE, create, events, now, record
from toolq.results import scripts
from toolq.results.runner import Scripts

ENVELOPE = '{"call_id": "c1"}'


def decide(lua: Scripts, kind: scripts.DecisionKind = "approve", **kw: Any) -> scripts.DecideReply:
    args: dict[str, Any] = {
        "call_id": "c1",
        "kind": kind,
        "by": "bob",
        "now": now(),
        "envelope_read": ENVELOPE if kind == "approve" else "",
        "check_approvals": kind == "approve",
        "maxlen": 1000,
        "ttl": 3600,
        "data": "{}",
        "result": '{"error_type": "approval_denied"}' if kind == "deny" else "",
        "new_envelope": "",
        "audit_maxlen": 100,
        "expired_result": '{"error_type": "approval_expired"}',
        "message": (QUEUE, MESSAGE),
        "approvals_read": "",
        "approvals_new": '[{"by": "bob"}]',
        "final": True,
        "new_digest": "",
        "approval": "signed",
        "run_id": "run1",
        "tool": "echo",
        "audit_sig": "sig",
        "expired_sig": "esig",
        "digest": "d1",
        "shown": "d1",
    }
    args.update(kw)
    return lua.run(scripts.DECIDE(keys=KEYS, decision=scripts.Decision(**args)))


def park(lua: Scripts, deadline: float | None = None) -> None:
    # dispatch stores the deadline as an extra field too (the approval card shows it)
    at = deadline or time.time() + 3600
    create(lua, status="awaiting_approval", deadline=at, fields={"deadline": repr(at)})


def audit(r: redis.Redis) -> list[str]:
    return [f[b"outcome"].decode() for _, f in r.xrange(KEYS.audit_stream)]


def test_decide_missing_and_conflict(r: redis.Redis, lua: Scripts):
    assert decide(lua).outcome == "missing"
    create(lua)
    reply = decide(lua)
    assert (reply.outcome, reply.value) == ("conflict", "queued")


def test_decide_past_the_deadline_expires_the_call(r: redis.Redis, lua: Scripts):
    park(lua, deadline=time.time() - 1)
    assert decide(lua).outcome == "expired"
    assert record(r)["status"] == "expired" and r.zscore(KEYS.pending_approvals, "c1") is None
    assert audit(r) == ["expired"] and events(r)[-1] == "call.expired"


def test_decide_refuses_changed_arguments_and_retries_moved_approvals(r: redis.Redis, lua: Scripts):
    park(lua)
    assert decide(lua, envelope_read='{"call_id": "c1", "changed": 1}').outcome == "digest"
    r.hset(KEYS.call("c1"), "approvers", '[{"by": "carol"}]')
    assert decide(lua, approvals_read="").outcome == "retry"
    assert record(r)["status"] == "awaiting_approval" and audit(r) == []


def test_decide_deny(r: redis.Redis, lua: Scripts):
    park(lua)
    reply = decide(lua, "deny")
    assert reply.outcome == "ok" and reply.value
    rec = record(r)
    assert (rec["status"], rec["decided_by"], rec["approval"]) == ("denied", "bob", "signed")
    assert audit(r) == ["denied"] and events(r)[-1] == "call.denied"


def test_decide_partial_then_final_approval_pushes_the_message(r: redis.Redis, lua: Scripts):
    park(lua)
    partial = decide(lua, final=False, new_digest="d2", new_envelope='{"call_id": "c1", "e": 1}')
    assert partial.outcome == "partial"
    rec = record(r)
    assert (rec["status"], rec["digest"], rec["envelope"]) == (
        "awaiting_approval",
        "d2",
        '{"call_id": "c1", "e": 1}',
    )
    final = decide(
        lua,
        by="carol",
        envelope_read='{"call_id": "c1", "e": 1}',
        approvals_read='[{"by": "bob"}]',
        approvals_new='[{"by": "bob"}, {"by": "carol"}]',
    )
    assert final.outcome == "ok"
    assert record(r)["status"] == "queued" and r.lrange(QUEUE, 0, -1) == [MESSAGE.encode()]
    assert r.zscore(KEYS.queued, "c1") is not None
    assert audit(r) == ["approved:partial", "approved"]


def test_decide_final_approval_without_a_message_goes_to_the_unsent_set(
    r: redis.Redis, lua: Scripts
):
    park(lua)
    assert decide(lua, message=None).outcome == "ok"
    assert r.zscore(KEYS.unsent, "c1") is not None and not r.exists(QUEUE)


def expire(lua: Scripts, at: float) -> str:
    return lua.run(
        scripts.EXPIRE(
            keys=KEYS,
            call_id="c1",
            run_id="run1",
            now=repr(at),
            maxlen=1000,
            ttl=3600,
            result='{"error_type": "approval_expired"}',
            audit_maxlen=100,
        )
    )


def test_expire_early_expired_and_gone(r: redis.Redis, lua: Scripts):
    park(lua, deadline=time.time() + 60)
    assert expire(lua, time.time()) == "early"
    assert expire(lua, time.time() + 120) == "expired"
    assert record(r)["status"] == "expired" and audit(r) == ["expired"]
    ((_, entry),) = r.xrange(KEYS.audit_stream)
    assert (entry[b"by"], entry[b"system"]) == (b"sweeper", b"1")
    r.zadd(KEYS.pending_approvals, {"c1": 0})
    assert expire(lua, time.time() + 120) == "gone"
    assert r.zscore(KEYS.pending_approvals, "c1") is None
