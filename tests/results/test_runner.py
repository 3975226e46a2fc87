"""One invocation path: EVALSHA, and a script Redis lost loaded and run once more."""

from __future__ import annotations

import pytest
import redis

from tests.results.conftest import KEYS, QUEUE, create, now, start
from toolq.results import scripts
from toolq.results.runner import Invocation, Scripts


def test_a_flushed_script_reruns_only_the_invocations_that_found_it_missing(
    r: redis.Redis, lua: Scripts
):
    r.script_flush()
    r.script_load(scripts.CREATE.source)  # CREATE is known, UNDO_CLAIM is not
    replies = lua.pipelined(
        [
            create_invocation("c1"),
            scripts.UNDO_CLAIM(
                keys=KEYS, call_id="c1", queue=QUEUE, message="m", now=now(), approval=""
            ),
        ]
    )
    # CREATE ran once (a second run would answer 'dup'); UNDO_CLAIM ran after its load
    assert [getattr(x, "outcome", x) for x in replies] == ["new", "not_succeeded"]
    assert r.llen(KEYS.run_calls("run1")) == 1
    assert r.script_exists(scripts.UNDO_CLAIM.sha) == [True]


def test_the_direct_connection_reloads_a_flushed_script(r: redis.Redis, lua: Scripts):
    create(lua)
    r.script_flush()
    assert start(lua).outcome == "ok"
    r.script_flush()
    assert start(lua).outcome == "ok"  # the same start again, after another flush
    assert r.script_exists(scripts.START.sha) == [True]


def test_commands_added_after_the_scripts_run_in_the_same_round_trip(r: redis.Redis, lua: Scripts):
    r.script_flush()
    replies = lua.pipelined([create_invocation("c1")], then=lambda pipe: pipe.set("t13:after", "1"))
    assert [x.outcome for x in replies] == ["new"] and r.get("t13:after") == b"1"


def test_after_commands_follow_an_invocation_run_again_after_noscript(r: redis.Redis, lua: Scripts):
    # ReplicaAcks' WAIT must follow the write it waits for: after a NOSCRIPT reload the
    # `after` commands are sent again behind the re-run, and their replies are the new ones.
    r.script_flush()
    (reply,), after = lua.pipelined_after(
        [create_invocation("c1")], [("LLEN", KEYS.run_calls("run1")), ("WAIT", 0, 0)]
    )
    assert reply.outcome == "new"
    assert after == [1, 0]  # LLEN ran after the re-run CREATE: it sees the call
    assert r.llen(KEYS.run_calls("run1")) == 1


def test_the_direct_connection_sends_after_commands_in_the_same_write(r: redis.Redis, lua: Scripts):
    create(lua)
    r.script_flush()
    invocation = scripts.START(
        keys=KEYS,
        call_id="c1",
        run_id="run1",
        token="tok",
        lease_ms=30_000,
        now=now(),
        maxlen=100,
        cancel_result="{}",
        now_ms=int(float(now()) * 1000),
    )
    reply, after = lua.direct_after(invocation, [("HGET", KEYS.call("c1"), "status")])
    assert reply.outcome == "ok" and after == [b"running"]
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        lua.direct_after(invocation, [("LLEN", KEYS.call("c1"))])
    # the refused command's reply was read: the connection is still in step
    assert lua.direct_after(invocation, [("HGET", KEYS.call("c1"), "status")])[1] == [b"running"]


def test_an_error_other_than_noscript_is_raised(r: redis.Redis, lua: Scripts):
    r.set(KEYS.call("c1"), "not a hash")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        start(lua)
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        lua.run(
            scripts.TRANSITION(
                keys=KEYS,
                call_id="c1",
                run_id="run1",
                from_states="*",
                to_status="failed",
                etype="call.failed",
                data="{}",
                maxlen=10,
                now=now(),
                ttl=10,
                result="",
            )
        )


def test_a_reply_outside_the_scripts_vocabulary_is_refused():
    with pytest.raises(ValueError, match=r"start\.lua replied 'later'"):
        scripts.START.parse([b"later"])


def create_invocation(call_id: str) -> Invocation[scripts.CreateReply]:
    return scripts.CREATE(
        keys=KEYS,
        idempotency=KEYS.idempotency("alice", "run1", call_id),
        call_id=call_id,
        run_id="run1",
        status="queued",
        envelope="{}",
        etype="call.queued",
        data="{}",
        maxlen=100,
        ttl=100,
        now=now(),
        deadline="0",
        name="echo",
        risk="safe",
        idempotent=False,
        timeout="",
        result="",
        message=None,
        owner="alice",
        admin=False,
        refresh=True,
    )
