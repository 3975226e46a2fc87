"""CREATE, START, FINISH, PROGRESS, RENEW, TRANSITION, RECOVER, RESEND: every outcome."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import redis

from tests.results.conftest import KEYS, MESSAGE, QUEUE, create, events, now, record, start
from toolq.results import scripts
from toolq.results.runner import Scripts


def finish(
    lua: Scripts,
    token: str = "tok",
    status: str = "succeeded",
    undo: str = "",
    bucket: str = "",
    settles: bool = True,
):
    return lua.direct(
        scripts.FINISH(
            keys=KEYS,
            call_id="c1",
            run_id="run1",
            token=token,
            status=status,
            result='{"output": 1}',
            etype=f"call.{status}",
            data=f'{{"status": "{status}"}}',
            maxlen=1000,
            now=now(),
            ttl=3600,
            undo=undo,
            undo_ttl=60,
            tool="echo",
            bucket=bucket,
            duration_us=1200 if bucket else 0,
            settles=settles,
        )
    )


def transition(lua: Scripts, from_states: str, to: str, call_id: str = "c1"):
    return lua.run(
        scripts.TRANSITION(
            keys=KEYS,
            call_id=call_id,
            run_id="run1",
            from_states=from_states,
            to_status=to,
            etype=f"call.{to}",
            data="{}",
            maxlen=1000,
            now=now(),
            ttl=3600,
            result='{"error_type": "cancelled"}' if to == "cancelled" else "",
            fields={"note": "n"},
        )
    )


def recover(lua: Scripts, max_recoveries: int = 1):
    return lua.run(
        scripts.RECOVER(
            keys=KEYS,
            call_id="c1",
            run_id="run1",
            now=now(),
            maxlen=1000,
            ttl=3600,
            max_recoveries=max_recoveries,
            lost_result='{"error_type": "worker_lost"}',
            timeout_result='{"error_type": "timeout"}',
            unknown_result='{"error_type": "outcome_unknown"}',
        )
    )


# -- CREATE -------------------------------------------------------------------------------------


def test_create_new_queued_pushes_the_message_with_the_record(r: redis.Redis, lua: Scripts):
    reply = create(lua)
    assert reply.outcome == "new" and reply.value
    rec = record(r)
    assert (rec["status"], rec["owner"], rec["push_seq"], rec["push_tag"]) == (
        "queued",
        "alice",
        "1",
        "tag-1",
    )
    assert r.lrange(QUEUE, 0, -1) == [MESSAGE.encode()]
    assert r.zscore(KEYS.queued, "c1") is not None and r.zscore(KEYS.unsent, "c1") is None
    assert r.lrange(KEYS.run_calls("run1"), 0, -1) == [b"c1"]
    assert events(r) == ["call.queued"]


def test_create_without_a_message_leaves_the_call_to_the_sweeper(r: redis.Redis, lua: Scripts):
    assert create(lua, message=None).outcome == "new"
    assert r.zscore(KEYS.unsent, "c1") is not None and not r.exists(QUEUE)


def test_create_parks_a_gated_call_and_keeps_extra_fields(r: redis.Redis, lua: Scripts):
    reply = create(lua, status="awaiting_approval", deadline=123.0, fields={"digest": "d1"})
    assert reply.outcome == "new"
    assert r.zscore(KEYS.pending_approvals, "c1") == 123.0
    assert record(r)["digest"] == "d1" and not r.exists(QUEUE)


def test_create_dup_returns_the_existing_call(r: redis.Redis, lua: Scripts):
    create(lua, key="k")
    reply = create(lua, "c2", key="k")
    assert (reply.outcome, reply.value) == ("dup", "c1")
    assert not r.exists(KEYS.call("c2")) and r.llen(QUEUE) == 1


def test_create_not_owner_writes_nothing_but_an_admin_may(r: redis.Redis, lua: Scripts):
    create(lua)
    reply = create(lua, "c2", owner="mallory")
    assert (reply.outcome, reply.value) == ("not_owner", "alice")
    assert not r.exists(KEYS.call("c2"))
    assert create(lua, "c3", owner="root", admin=True).outcome == "new"
    assert record(r, "c3")["owner"] == "alice"  # the run's owner, not the admin


def test_create_sets_the_run_ttls_once_per_dispatch(r: redis.Redis, lua: Scripts):
    run_keys = [KEYS.run_owner("run1"), KEYS.run_calls("run1"), KEYS.run_stream("run1")]
    # A dispatch of three calls: only the last one (refresh) sets the run's TTLs...
    create(lua, "c1", refresh=False)
    assert r.ttl(KEYS.run_owner("run1")) > 0  # the owner key is created with its TTL
    assert r.ttl(KEYS.run_calls("run1")) == -1 and r.ttl(KEYS.run_stream("run1")) == -1
    create(lua, "c2", refresh=False)
    create(lua, "c3")
    assert all(3500 < r.ttl(k) <= 3600 for k in run_keys)
    # ...and a later dispatch into the run sets them again, even when it is only a dup.
    for k in run_keys:
        r.expire(k, 100)
    assert create(lua, "c4", key="c1").outcome == "dup"
    assert all(3500 < r.ttl(k) <= 3600 for k in run_keys)
    assert r.ttl(KEYS.idempotency("alice", "run1", "c3")) > 3500
    assert r.ttl(KEYS.call("c3")) == -1  # a record expires once it is final


def test_create_refuses_a_claimed_key_of_another_fingerprint(r: redis.Redis, lua: Scripts):
    assert create(lua, "c1", fingerprint="f-one").outcome == "new"
    written = {k: r.dump(k) for k in r.keys("t13:*") if r.type(k) != b"stream"}
    # The same key for another call: refused with the call it names, nothing written.
    reply = create(lua, "c2", key="c1", fingerprint="f-two")
    assert (reply.outcome, reply.value) == ("call_id_conflict", "c1")
    assert not r.exists(KEYS.call("c2"))
    assert {k: r.dump(k) for k in r.keys("t13:*") if r.type(k) != b"stream"} == written
    assert r.xlen(KEYS.run_stream("run1")) == 1
    # The same fingerprint is a retried dispatch: the same call.
    again = create(lua, "c3", key="c1", fingerprint="f-one")
    assert (again.outcome, again.value) == ("dup", "c1")
    # A claim made before claims held fingerprints (the bare call id) is a duplicate, as
    # it was then; so is a reuse by a caller that sends no fingerprint.
    r.set(KEYS.idempotency("alice", "run1", "old"), "c-old")
    old = create(lua, "c4", key="old", fingerprint="f-any")
    assert (old.outcome, old.value) == ("dup", "c-old")
    assert create(lua, "c5", key="c1").outcome == "dup"


def test_create_of_a_final_call_gives_its_record_a_ttl(r: redis.Redis, lua: Scripts):
    reply = lua.run(
        scripts.CREATE(
            keys=KEYS,
            idempotency=KEYS.idempotency("alice", "run1", "c1"),
            call_id="c1",
            run_id="run1",
            status="failed",
            envelope="{}",
            etype="call.failed",
            data='{"status": "failed"}',
            maxlen=1000,
            ttl=3600,
            now=now(),
            deadline="0",
            name="echo",
            risk="safe",
            idempotent=False,
            timeout="",
            result='{"error_type": "invalid_arguments"}',
            message=None,
            owner="alice",
            admin=False,
            refresh=True,
            fields={"digest": "d"},
        )
    )
    assert reply.outcome == "new"
    rec = record(r)
    assert (rec["status"], rec["result"], rec["digest"]) == (
        "failed",
        '{"error_type": "invalid_arguments"}',
        "d",
    )
    assert rec["finished_at"] == rec["created_at"] and 3500 < r.ttl(KEYS.call("c1")) <= 3600


def test_events_of_announced_types_enter_the_webhook_outbox(r: redis.Redis, lua: Scripts):
    r.sadd(KEYS.webhook_events, "call.queued")
    reply = create(lua, run_id="run:with:colons")
    ((_, fields),) = r.xrange(KEYS.webhook_outbox)
    assert fields[b"run_id"] == b"run:with:colons" and fields[b"event_id"].decode() == reply.value
    start(lua, run_id="run:with:colons")  # call.started is not announced
    assert r.xlen(KEYS.webhook_outbox) == 1


# -- START --------------------------------------------------------------------------------------


def test_start_ok_and_a_repeat_with_the_same_token(r: redis.Redis, lua: Scripts):
    create(lua)
    first = start(lua)
    assert (first.outcome, first.attempt, first.envelope) == ("ok", 1, '{"call_id": "c1"}')
    assert r.get(KEYS.lease("c1")) == b"tok" and r.zscore(KEYS.queued, "c1") is None
    again = start(lua)
    assert (again.outcome, again.attempt) == ("ok", 1)
    assert events(r) == ["call.queued", "call.started"]
    assert record(r)["attempt"] == "1"


def test_start_after_a_recovery_counts_the_attempt(r: redis.Redis, lua: Scripts):
    create(lua, idempotent=True)
    start(lua, token="first")
    r.delete(KEYS.lease("c1"))
    recover(lua)
    again = start(lua, token="second")
    assert (again.outcome, again.attempt) == ("ok", 2) and record(r)["attempt"] == "2"
    assert again.envelope == '{"call_id": "c1"}' and r.get(KEYS.lease("c1")) == b"second"


def test_start_skip_missing_leased_and_run_mismatch(r: redis.Redis, lua: Scripts):
    assert start(lua).outcome == "missing"
    create(lua)
    mismatch = start(lua, run_id="other")
    assert (mismatch.outcome, mismatch.status) == ("skip", "run_mismatch")
    r.set(KEYS.lease("c1"), "someone")
    assert start(lua).outcome == "leased"
    r.delete(KEYS.lease("c1"))
    start(lua, token="first")
    skipped = start(lua, token="second")
    assert (skipped.outcome, skipped.status) == ("skip", "running")


def test_start_cancels_a_call_whose_cancel_flag_is_set(r: redis.Redis, lua: Scripts):
    # The flag is set while the call runs; its worker died and the call was requeued.
    create(lua, idempotent=True)
    start(lua, token="first")
    r.set(KEYS.cancel("c1"), "1")
    r.delete(KEYS.lease("c1"))
    assert recover(lua) == "requeue"
    assert start(lua).outcome == "cancelled"
    assert record(r)["status"] == "cancelled" and not r.exists(KEYS.lease("c1"))
    assert events(r) == ["call.queued", "call.started", "call.retrying", "call.cancelled"]


def test_a_first_start_does_not_look_for_a_cancel_flag(r: redis.Redis, lua: Scripts):
    # Only a running call gets a flag; a flag on a call never started is not looked up.
    create(lua)
    r.set(KEYS.cancel("c1"), "1")
    assert start(lua).outcome == "ok"


# -- FINISH / PROGRESS / RENEW ------------------------------------------------------------------


def test_finish_ok_repeat_and_stale(r: redis.Redis, lua: Scripts):
    create(lua)
    start(lua)
    assert (
        lua.direct(
            scripts.PROGRESS(
                keys=KEYS,
                call_id="c1",
                run_id="run1",
                token="tok",
                etype="call.progress",
                data="{}",
                maxlen=1000,
                now=now(),
            )
        )
        == "ok"
    )
    assert finish(lua, token="other") == "stale"
    assert finish(lua, undo='{"path": "x"}') == "ok"
    assert record(r)["status"] == "succeeded" and r.get(KEYS.undo("c1")) == b'{"path": "x"}'
    assert not r.exists(KEYS.lease("c1")) and r.zscore(KEYS.running, "c1") is None
    assert finish(lua) == "ok"  # the same finish again: nothing changes
    assert finish(lua, status="failed") == "stale"  # finished, and not as this
    assert events(r) == ["call.queued", "call.started", "call.progress", "call.succeeded"]


def test_progress_of_a_call_not_running_under_the_token_is_stale(r: redis.Redis, lua: Scripts):
    create(lua)
    progress = scripts.PROGRESS(
        keys=KEYS,
        call_id="c1",
        run_id="run1",
        token="tok",
        etype="call.progress",
        data="{}",
        maxlen=1000,
        now=now(),
    )
    assert lua.direct(progress) == "stale"
    start(lua, token="other")
    assert lua.direct(progress) == "stale"


def renewal(token: str, now_ms: int, record: str | None = None):
    """RENEW of c1's lease for a minute (``record``: a call's, else as an undo's)."""
    return scripts.RENEW(
        lease=KEYS.lease("c1"),
        running=KEYS.running,
        call_id="c1",
        token=token,
        lease_ms=60_000,
        now_ms=now_ms,
        record=record,
    )


def test_renew_extends_only_a_lease_this_token_holds(r: redis.Redis, lua: Scripts):
    create(lua)
    start(lua, lease_ms=1000)
    now_ms = int(time.time() * 1000)

    def renew(token: str):
        return renewal(token, now_ms)

    assert lua.pipelined([renew("tok"), renew("other")]) == [True, False]
    assert r.pttl(KEYS.lease("c1")) > 1000
    assert r.zscore(KEYS.running, "c1") == now_ms + 60_000


def test_renew_takes_back_a_lapsed_lease_nobody_recovered(r: redis.Redis, lua: Scripts):
    """A worker starved past its lease keeps the call while no one recovered it."""
    create(lua)
    start(lua, lease_ms=1000)
    now_ms = int(time.time() * 1000)

    def renew(token: str, record: str | None = KEYS.call("c1")):
        return renewal(token, now_ms, record)

    r.delete(KEYS.lease("c1"))  # what its expiry does
    # Not another token's, nor an undo's (which has no record to ask).
    assert lua.pipelined([renew("other"), renew("tok", record=None)]) == [False, False]
    assert r.exists(KEYS.lease("c1")) == 0
    assert lua.direct(renew("tok")) is True
    assert r.get(KEYS.lease("c1")) == b"tok" and r.pttl(KEYS.lease("c1")) > 1000
    assert r.zscore(KEYS.running, "c1") == now_ms + 60_000
    # A call under a concurrency cap whose slot lapsed too (another call may hold it now)
    # is not taken back; one still holding its slot is, and the slot is renewed with it.
    slot = "test:slots:solo"
    r.hset(KEYS.call("c1"), "limits", json.dumps([{"kind": "concurrency", "key": slot}]))
    r.delete(KEYS.lease("c1"))
    assert lua.direct(renew("tok")) is False
    r.zadd(slot, {"c1": now_ms})
    assert lua.direct(renew("tok")) is True
    assert r.zscore(slot, "c1") == now_ms + 60_000
    # Once recovered (the record no longer runs under this token) it is not taken back.
    r.delete(KEYS.lease("c1"))
    recover(lua)
    assert lua.direct(renew("tok")) is False
    assert r.exists(KEYS.lease("c1")) == 0


# -- TRANSITION ---------------------------------------------------------------------------------


def test_transition_ok_conflict_and_missing(r: redis.Redis, lua: Scripts):
    assert transition(lua, "queued", "cancelled").outcome == "missing"
    create(lua, message=None)
    ok = transition(lua, "awaiting_approval,queued", "cancelled")
    assert ok.outcome == "ok" and ok.value
    rec = record(r)
    assert (rec["status"], rec["note"]) == ("cancelled", "n") and "finished_at" in rec
    assert r.zscore(KEYS.unsent, "c1") is None
    conflict = transition(lua, "queued", "failed")
    assert (conflict.outcome, conflict.value) == ("conflict", "cancelled")
    assert transition(lua, "*", "queued").outcome == "ok"
    assert r.zscore(KEYS.unsent, "c1") is not None


# -- RECOVER ------------------------------------------------------------------------------------


def test_recover_alive_and_gone(r: redis.Redis, lua: Scripts):
    create(lua)
    start(lua)
    assert recover(lua) == "alive"
    r.delete(KEYS.lease("c1"))
    r.hset(KEYS.call("c1"), "status", "succeeded")
    assert recover(lua) == "gone" and r.zscore(KEYS.running, "c1") is None


def test_recover_requeues_an_idempotent_call_then_fails_it(r: redis.Redis, lua: Scripts):
    create(lua, idempotent=True)
    start(lua)
    r.delete(KEYS.lease("c1"))
    assert recover(lua, max_recoveries=1) == "requeue"
    rec = record(r)
    assert (rec["status"], rec["recoveries"], rec["token"]) == ("queued", "1", "")
    assert r.zscore(KEYS.unsent, "c1") is not None
    start(lua, token="t2")
    r.delete(KEYS.lease("c1"))
    assert recover(lua, max_recoveries=1) == "failed"
    assert '"worker_lost"' in record(r)["result"]
    assert events(r)[-1] == "call.failed" and "call.retrying" in events(r)


def test_recover_parks_a_lost_non_idempotent_call_as_unknown(r: redis.Redis, lua: Scripts):
    create(lua)
    start(lua)
    r.delete(KEYS.lease("c1"))
    assert recover(lua) == "unknown"
    rec = record(r)
    assert (rec["status"], rec["token"]) == ("unknown", "")
    assert '"outcome_unknown"' in rec["result"] and "lost_at" in rec
    assert r.zscore(KEYS.unknown, "c1") is not None
    assert r.zscore(KEYS.unsent, "c1") is None and r.ttl(KEYS.call("c1")) == -1
    assert events(r)[-1] == "call.unknown"
    assert start(lua, token="t2").outcome == "skip"  # never started again from here


def resolve(lua: Scripts, outcome: str):
    final = outcome in ("succeeded", "failed")
    return lua.run(
        scripts.RESOLVE(
            keys=KEYS,
            call_id="c1",
            run_id="run1",
            outcome=outcome,
            by="ann",
            now=now(),
            maxlen=1000,
            ttl=3600,
            result='{"output": "by ann"}' if final else "",
            resolution="{}",
            data="{}",
            attempt=1,
            etype=f"call.{outcome}" if final else "",
        )
    )


def test_the_runner_that_lost_an_unknown_call_settles_it_when_it_finishes(
    r: redis.Redis, lua: Scripts
):
    # Its worker hung past the lease: the call was parked as unknown for a person; the worker
    # wakes and finishes it. Its outcome is the call's (nobody else knew it).
    create(lua)
    start(lua)
    r.delete(KEYS.lease("c1"))
    assert recover(lua) == "unknown"
    assert finish(lua, token="someone-else") == "stale"
    # an end toolq caused (its lost lease cancelled the handler, the time limit) says nothing
    assert finish(lua, status="cancelled", settles=False) == "stale"
    assert record(r)["status"] == "unknown"
    assert finish(lua) == "ok"
    rec = record(r)
    assert (rec["status"], rec["result"], rec["settled_late"]) == (
        "succeeded",
        '{"output": 1}',
        "1",
    )
    assert r.zscore(KEYS.unknown, "c1") is None and r.ttl(KEYS.call("c1")) > 0
    assert events(r)[-2:] == ["call.unknown", "call.succeeded"]
    assert finish(lua) == "ok"  # its reply lost, the same finish again: nothing changes
    assert finish(lua, status="failed") == "stale"
    assert events(r)[-1] == "call.succeeded"


def test_a_persons_resolution_stands_over_the_lost_runners_late_finish(
    r: redis.Redis, lua: Scripts
):
    create(lua)
    start(lua)
    r.delete(KEYS.lease("c1"))
    assert recover(lua) == "unknown"
    assert resolve(lua, "failed").outcome == "ok"
    assert finish(lua) == "stale"
    assert record(r)["status"] == "failed" and record(r)["result"] == '{"output": "by ann"}'


def test_a_late_finish_never_ends_the_rerun_a_person_asked_for(r: redis.Redis, lua: Scripts):
    create(lua)
    start(lua)
    r.delete(KEYS.lease("c1"))
    assert recover(lua) == "unknown"
    assert resolve(lua, "rerun").outcome == "ok"
    assert start(lua, token="t2").outcome == "ok"
    assert finish(lua) == "stale"  # the lost attempt's runner
    assert record(r)["status"] == "running"
    assert finish(lua, token="t2") == "ok"


def test_recover_a_call_past_its_time_limit_is_a_timeout(r: redis.Redis, lua: Scripts):
    create(lua, idempotent=True, timeout="0.001")
    start(lua)
    r.delete(KEYS.lease("c1"))
    time.sleep(0.01)
    assert recover(lua) == "timeout"
    assert record(r)["status"] == "failed" and '"timeout"' in record(r)["result"]


# -- RESEND -------------------------------------------------------------------------------------


def test_resend_pushes_only_a_call_still_queued(r: redis.Redis, lua: Scripts):
    create(lua, message=None)
    create(lua, "c2", message=None)
    r.hset(KEYS.call("c2"), "status", "running")
    r.set(KEYS.lost_suspect("c1"), "1")
    pushed = lua.pipelined(
        [
            scripts.RESEND(keys=KEYS, call_id=c, queue=QUEUE, message=MESSAGE, now=now())
            for c in ("c1", "c2")
        ]
    )
    assert pushed == [True, False]
    assert r.llen(QUEUE) == 1 and record(r)["push_seq"] == "1"
    assert not r.exists(KEYS.lost_suspect("c1"))
    assert r.zrange(KEYS.unsent, 0, -1) == [] and r.zrange(KEYS.queued, 0, -1) == [b"c1"]


def test_give_back_pushes_one_message_for_the_calls_still_queued(r: redis.Redis, lua: Scripts):
    for call_id in ("c1", "c2", "c3"):
        create(lua, call_id, message=None)
    r.hset(KEYS.call("c2"), "status", "running")  # started meanwhile: not given back
    r.hset(KEYS.call("c3"), "admission", "waiting")  # waits for admission: not given back
    given = lua.run(
        scripts.GIVE_BACK(
            keys=KEYS, queue=QUEUE, message=MESSAGE, call_ids=["c1", "c2", "c3"], now=now()
        )
    )
    assert given == 1 and r.lrange(QUEUE, 0, -1) == [MESSAGE.encode()]
    assert (record(r)["push_seq"], record(r)["push_tag"]) == ("1", "tag-1")
    assert "push_seq" not in record(r, "c2") and "push_seq" not in record(r, "c3")
    assert r.zrange(KEYS.queued, 0, -1) == [b"c1"]
    nothing = lua.run(
        scripts.GIVE_BACK(keys=KEYS, queue=QUEUE, message=MESSAGE, call_ids=["c2"], now=now())
    )
    assert nothing == 0 and r.llen(QUEUE) == 1


def test_an_early_give_back_goes_only_onto_an_empty_queue(r: redis.Redis, lua: Scripts):
    """A share for the worker's idle slots would wait behind the queue's messages: not sent."""
    create(lua, "c1", message=None)

    def give() -> int:
        return lua.run(
            scripts.GIVE_BACK(
                keys=KEYS, queue=QUEUE, message=MESSAGE, call_ids=["c1"], now=now(),
                unless_waiting=True,
            )
        )  # fmt: skip

    r.lpush(QUEUE, "another message")
    assert give() == -1 and r.llen(QUEUE) == 1 and "push_seq" not in record(r)
    r.delete(QUEUE)
    assert give() == 1 and r.lrange(QUEUE, 0, -1) == [MESSAGE.encode()]


# -- what the hot path asks of Redis ------------------------------------------------------------


def issued(r: redis.Redis, run: Callable[[], Any]) -> Counter[str]:
    """The commands ``run()`` had Redis run (a script's own and each it issued), by name."""

    def stats() -> Counter[str]:
        found: Any = r.info("commandstats")
        return Counter({k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in found.items()})

    before = stats()
    run()
    after = stats()
    after.subtract(before)
    return Counter({k: n for k, n in after.items() if n > 0 and k != "info"})


class Collected:
    """Stands for ``Scripts`` to ``create``: hands back the invocation instead of running it."""

    def run(self, invocation: Any) -> Any:
        return invocation


def test_start_and_finish_read_the_record_once_and_ask_once_about_hooks_and_history(
    r: redis.Redis, lua: Scripts
):
    create(lua)
    started = issued(r, lambda: start(lua))
    finished = issued(r, lambda: finish(lua, bucket="5"))
    for script in (started, finished):
        assert script["hmget"] == 1  # the script's own read; its event needs no other
        assert script["exists"] == 1 and script["sismember"] == 0  # no webhooks, no history
    assert finished["hincrby"] == 3  # the duration's bucket and sum, the event's counter
    durations = r.hgetall(KEYS.metrics_durations)
    assert durations == {b"echo|le|5": b"1", b"echo|sum_us": b"1200"}


def test_a_groups_members_never_pass_through_the_unsent_set(r: redis.Redis, lua: Scripts):
    inbox = KEYS.wait_inbox("reader1")
    members = [
        (c, 1, create(Collected(), c, message=None, grouped=True, notify=inbox, refresh=c == "c3"))
        for c in ("c1", "c2", "c3")
    ]
    group = scripts.CREATE_GROUP(keys=KEYS, now=now(), messages=[(QUEUE, MESSAGE)], members=members)
    ran = issued(r, lambda: lua.run(group))
    assert ran["hmget"] == 0  # each event's tool, risk and inbox come from CREATE's ARGV
    assert ran["zrem"] == 0 and not r.exists(KEYS.unsent)
    assert ran["lpush"] == 1 and r.zcard(KEYS.queued) == 3
    record = r.hgetall(KEYS.call("c2"))
    assert (record[b"push_seq"], record[b"notify"]) == (b"1", inbox.encode())
