"""UNDO_CLAIM, UNDO_START, UNDO_FINISH, UNDO_RECOVER, UNDO_RESEND and WEBHOOK_CLAIM."""

from __future__ import annotations

import time

import redis

from tests.results.conftest import KEYS, MESSAGE, QUEUE, create, events, now, record
from toolq.results import scripts
from toolq.results.runner import Scripts


def claim(lua: Scripts, approval: str = "") -> str:
    return lua.run(
        scripts.UNDO_CLAIM(
            keys=KEYS, call_id="c1", queue=QUEUE, message=MESSAGE, now=now(), approval=approval
        )
    )


def undo_start(lua: Scripts, token: str = "u1") -> tuple[str, str]:
    return lua.direct(
        scripts.UNDO_START(
            keys=KEYS,
            call_id="c1",
            token=token,
            lease_ms=10_000,
            now=now(),
            now_ms=int(time.time() * 1000),
        )
    )


def undo_finish(lua: Scripts, token: str = "u1", state: str = "undone") -> str:
    return lua.direct(
        scripts.UNDO_FINISH(
            keys=KEYS,
            call_id="c1",
            run_id="run1",
            token=token,
            state=state,
            etype="call.undone" if state == "undone" else "call.undo_failed",
            data="{}",
            maxlen=1000,
            now=now(),
        )
    )


def undo_recover(lua: Scripts, message: str = MESSAGE) -> str:
    return lua.run(
        scripts.UNDO_RECOVER(
            keys=KEYS,
            call_id="c1",
            run_id="run1",
            queue=QUEUE,
            message=message,
            now=now(),
            maxlen=1000,
            max_recoveries=1,
            lost_data='{"error_type": "worker_lost"}',
        )
    )


def finished(lua: Scripts, r: redis.Redis, idempotent: bool = False) -> None:
    create(lua, message=None, idempotent=idempotent)
    r.hset(KEYS.call("c1"), "status", "succeeded")
    r.set(KEYS.undo("c1"), '{"path": "x"}')


def test_undo_claim_outcomes(r: redis.Redis, lua: Scripts):
    assert claim(lua) == "missing"
    create(lua, message=None)
    r.set(KEYS.undo("c1"), "{}")
    assert claim(lua) == "not_succeeded"  # only a succeeded call's effect is undone
    assert "undo_state" not in record(r)
    r.hset(KEYS.call("c1"), "status", "succeeded")
    r.delete(KEYS.undo("c1"))
    assert claim(lua) == "nothing"
    r.set(KEYS.undo("c1"), "{}")
    assert claim(lua, approval='{"payload": {}}') == "ok"
    rec = record(r)
    assert rec["undo_approval"] == '{"payload": {}}'  # kept for the worker to check
    assert (rec["undo_state"], rec["undo_push_seq"], rec["undo_push_tag"]) == (
        "requested",
        "1",
        "tag-1",
    )
    assert r.llen(QUEUE) == 1 and r.zscore(KEYS.undo_queued, "c1") is not None
    assert claim(lua) == "in_progress"
    r.hset(KEYS.call("c1"), "undo_state", "undone")
    assert claim(lua) == "undone"


def test_undo_start_ok_repeat_leased_and_skip(r: redis.Redis, lua: Scripts):
    finished(lua, r)
    assert undo_start(lua) == ("skip", "")
    claim(lua)
    r.set(KEYS.undo_lease("c1"), "other")
    assert undo_start(lua) == ("leased", "")
    r.delete(KEYS.undo_lease("c1"))
    assert undo_start(lua) == ("ok", "")
    assert undo_start(lua) == ("ok", "")  # the same claim again
    assert undo_start(lua, token="u2") == ("skip", "undoing")
    assert r.zscore(KEYS.undo_queued, "c1") is None and r.zscore(KEYS.undoing, "c1") is not None


def test_undo_finish_ok_repeat_and_stale(r: redis.Redis, lua: Scripts):
    finished(lua, r)
    claim(lua)
    undo_start(lua)
    assert undo_finish(lua, token="other") == "stale"
    assert undo_finish(lua) == "ok"
    assert record(r)["undo_state"] == "undone" and not r.exists(KEYS.undo("c1"))
    assert not r.exists(KEYS.undo_lease("c1")) and r.zscore(KEYS.undoing, "c1") is None
    assert undo_finish(lua) == "ok"
    assert undo_finish(lua, state="failed") == "stale"
    assert events(r)[-1] == "call.undone"


def test_undo_recover_alive_gone_requeue_failed(r: redis.Redis, lua: Scripts):
    finished(lua, r, idempotent=True)
    claim(lua)
    undo_start(lua)
    assert undo_recover(lua) == "alive"
    r.delete(KEYS.undo_lease("c1"))
    assert undo_recover(lua) == "requeue"
    assert record(r)["undo_state"] == "requested" and r.llen(QUEUE) == 2
    assert undo_recover(lua) == "gone"  # requested, not undoing
    undo_start(lua, token="u2")
    r.delete(KEYS.undo_lease("c1"))
    assert undo_recover(lua) == "failed"  # recovered once already
    assert record(r)["undo_state"] == "failed" and events(r)[-1] == "call.undo_failed"


def test_undo_recover_without_a_message_fails_an_idempotent_undo(r: redis.Redis, lua: Scripts):
    finished(lua, r, idempotent=True)
    claim(lua)
    undo_start(lua)
    r.delete(KEYS.undo_lease("c1"))
    assert undo_recover(lua, message="") == "failed"


def test_undo_resend_pushes_only_an_undo_still_requested(r: redis.Redis, lua: Scripts):
    finished(lua, r)
    claim(lua)
    r.set(KEYS.lost_undo_suspect("c1"), "1")

    def resend() -> bool:
        return lua.run(
            scripts.UNDO_RESEND(keys=KEYS, call_id="c1", queue=QUEUE, message=MESSAGE, now=now())
        )

    assert resend() is True
    assert r.llen(QUEUE) == 2 and not r.exists(KEYS.lost_undo_suspect("c1"))
    undo_start(lua)
    assert resend() is False and r.zscore(KEYS.undo_queued, "c1") is None


def test_webhook_claim_takes_a_due_delivery_once_per_attempt(r: redis.Redis, lua: Scripts):
    def take(at: float):
        return lua.run(
            scripts.WEBHOOK_CLAIM(keys=KEYS, delivery_id="d1", now=repr(at), until=repr(at + 30))
        )

    t = time.time()
    assert take(t) is None  # nothing due
    r.zadd(KEYS.webhook_due, {"d1": t})
    assert take(t) is None and r.zscore(KEYS.webhook_due, "d1") is None  # record gone
    r.hset(KEYS.webhook_delivery("d1"), mapping={"type": "call.failed", "attempts": "0"})
    r.zadd(KEYS.webhook_due, {"d1": t})
    assert take(t) == {"type": "call.failed", "attempts": "1"}
    assert take(t + 1) is None  # claimed until t + 30
    assert take(t + 31) == {"type": "call.failed", "attempts": "2"}
