"""What a call's scripts ask of Redis: each record read once, no index written to and undone."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from typing import Any

import redis

from tests.results.conftest import KEYS, MESSAGE, QUEUE, create, now, start
from toolq.results import scripts
from toolq.results.runner import Invocation, Scripts


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


def member(call_id: str) -> Invocation[scripts.CreateReply]:
    """The CREATE of a call a group's message carries."""
    return scripts.CREATE(
        keys=KEYS,
        idempotency=KEYS.idempotency("alice", "run1", call_id),
        call_id=call_id,
        run_id="run1",
        status="queued",
        envelope=f'{{"call_id": "{call_id}"}}',
        etype="call.queued",
        data=json.dumps({"status": "queued"}),
        maxlen=1000,
        ttl=3600,
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
        refresh=call_id == "c3",
        grouped=True,
        notify=KEYS.wait_inbox("reader1"),
    )


def test_start_and_finish_read_the_record_once_and_ask_once_about_hooks_and_history(
    r: redis.Redis, lua: Scripts
):
    create(lua)
    started = issued(r, lambda: start(lua))
    finished = issued(
        r,
        lambda: lua.direct(
            scripts.FINISH(
                keys=KEYS,
                call_id="c1",
                run_id="run1",
                token="tok",
                status="succeeded",
                result="{}",
                etype="call.succeeded",
                data='{"status": "succeeded"}',
                maxlen=1000,
                now=now(),
                ttl=3600,
                undo="",
                undo_ttl=60,
                tool="echo",
                bucket="5",
                duration_us=1200,
            )
        ),
    )
    for script in (started, finished):
        assert script["hmget"] == 1  # the script's own read; its event needs no other
        assert script["exists"] == 1 and script["sismember"] == 0  # no webhooks, no history
    assert finished["hincrby"] == 3  # the duration's bucket and sum, the event's counter
    durations = r.hgetall(KEYS.metrics_durations)
    assert durations == {b"echo|le|5": b"1", b"echo|sum_us": b"1200"}


def test_a_groups_members_never_pass_through_the_unsent_set(r: redis.Redis, lua: Scripts):
    ids = ["c1", "c2", "c3"]
    group = scripts.CREATE_GROUP(
        keys=KEYS,
        now=now(),
        messages=[(QUEUE, MESSAGE)],
        members=[(call_id, 1, member(call_id)) for call_id in ids],
    )
    ran = issued(r, lambda: lua.run(group))
    assert ran["hmget"] == 0  # each event's tool, risk and inbox come from CREATE's ARGV
    assert ran["zrem"] == 0 and not r.exists(KEYS.unsent)
    assert ran["lpush"] == 1 and r.zcard(KEYS.queued) == 3
    record = r.hgetall(KEYS.call("c2"))
    assert (record[b"push_seq"], record[b"notify"]) == (b"1", KEYS.wait_inbox("reader1").encode())
