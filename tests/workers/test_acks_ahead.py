"""kombu's ``unacked`` bookkeeping on a worker: no ``MULTI``, no round trip for the ack.

A message's entry is written without ``MULTI`` when it is taken, and removed in the round
trip of its last FINISH: by the thread that ran it, or by the prefork child that did, whose
parent then acknowledges the message in memory only.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import redis

from tests.conftest import Workers
from toolq import CallStatus, Client, RiskLevel, Settings
from toolq.broker import Publisher, acks
from toolq.keys import KOMBU_UNACKED, KOMBU_UNACKED_INDEX
from toolq.workers.app import create_celery


def _monitor(settings: Settings, seen: list[tuple[str, list[str]]], stop: threading.Event) -> None:
    """Every command Redis runs, as ``(client address, words)``, until ``stop``."""
    with redis.Redis.from_url(settings.redis_url).monitor() as monitor:
        while not stop.is_set():
            command: Any = monitor.next_command()
            who = f"{command['client_address']}:{command['client_port']}"
            seen.append((who, str(command["command"]).split()))


@pytest.mark.parametrize("pool", ["threads", "prefork"])
def test_the_ack_rides_behind_the_last_finish(
    client: Client, workers: Workers, settings: Settings, r: redis.Redis, pool: str
) -> None:
    # kombu would acknowledge each message with a round trip of its own (MULTI ZREM HDEL
    # EXEC) after the task returns. Each message's entry goes instead on the connection of
    # its last FINISH, right behind it, with no MULTI around it.
    workers.start("safe", pool=pool, concurrency=4 if pool == "threads" else 2)
    seen: list[tuple[str, list[str]]] = []
    stop = threading.Event()
    watcher = threading.Thread(target=_monitor, args=(settings, seen, stop), daemon=True)
    watcher.start()
    time.sleep(0.3)
    batches = [
        client.dispatch(
            [{"id": str(i), "name": "echo", "arguments": {"text": "x"}} for i in range(n)]
        )
        for n in (1, 2, 3, 1)
    ]
    for batch in batches:
        assert {res.status for res in batch.wait(timeout=30)} == {CallStatus.SUCCEEDED}
    time.sleep(0.3)
    stop.set()
    r.ping()  # wakes the monitor for its last read
    watcher.join(5)

    assert r.hlen(KOMBU_UNACKED) == 0
    removals = [
        (i, who, words[2])
        for i, (who, words) in enumerate(seen)
        if words[:2] == ["ZREM", KOMBU_UNACKED_INDEX]
    ]
    # One entry per message; the same tags (sent again behind a FINISH that Redis asked to
    # repeat, NOSCRIPT, after a restart: removing twice is harmless).
    taken = {words[3] for _, words in seen if words[:2] == ["ZADD", KOMBU_UNACKED_INDEX]}
    assert {tag for _, _, tag in removals} == taken
    assert len(taken) >= len(batches)
    for i, who, _ in removals:
        # Behind the FINISH (and other messages' entries of the same round trip), no MULTI.
        before = [words[0] for w, words in seen[:i] if w == who]
        while before[-1] in ("ZREM", "HDEL"):
            before.pop()
        assert before[-1] == "EVALSHA", before[-3:]
        assert [words[0] for w, words in seen[i + 1 :] if w == who][:1] == ["HDEL"]
    # Taking a message is recorded without a MULTI either: the index, then the entry.
    for i, (who, words) in enumerate(seen):
        if words[:2] == ["ZADD", KOMBU_UNACKED_INDEX]:
            assert [w[0] for c, w in seen[:i] if c == who][-1:] != ["MULTI"]
            assert [w[:2] for c, w in seen[i + 1 :] if c == who][:1] == [["HSET", KOMBU_UNACKED]]


def test_marks_kombu_never_acknowledges_are_bounded() -> None:
    # A tag whose acknowledgement never comes (the consumer's connection lost in between)
    # must not stay in a long-running worker's memory: past the bound the oldest mark goes,
    # and its acknowledgement, if it ever comes, takes kombu's own round trip.
    tags = [f"bounded-{i}" for i in range(acks._KEPT + 5)]
    for tag in tags:
        acks.sent(tag)
    try:
        assert len(acks._sent) <= acks._KEPT
        assert not acks.take(tags[0])
        assert acks.take(tags[-1])
        assert not acks.take(tags[-1])
    finally:
        for tag in tags:
            acks.take(tag)


def test_a_prefork_parent_acknowledges_what_its_child_did_not(
    client: Client, workers: Workers, settings: Settings, r: redis.Redis, wait_for: Any
) -> None:
    # A message whose calls write no FINISH (a redelivery of a final call, a call id that
    # does not exist) has its entry removed by no child: the parent's own acknowledgement
    # must still remove it, or kombu would restore the message after its visibility timeout.
    from tests.apps import registry

    workers.start("safe", pool="prefork", concurrency=2)
    batch = client.dispatch([{"id": "1", "name": "echo", "arguments": {"text": "x"}}])
    (done,) = batch.wait(timeout=30)
    assert done.status == CallStatus.SUCCEEDED
    wait_for(lambda: r.hlen(KOMBU_UNACKED) == 0, message="the first delivery's entry stays")
    publisher = Publisher(create_celery(settings, registry), settings)
    for call_id in (done.call_id, "no-such-call"):
        queue, raw = publisher.message(call_id, RiskLevel.SAFE, None, batch.run_id)
        r.lpush(queue, raw)
    wait_for(lambda: r.llen(queue) == 0, message="the messages were not taken")
    wait_for(lambda: r.hlen(KOMBU_UNACKED) == 0, message="an entry no child removed stays")
    assert r.zcard(KOMBU_UNACKED_INDEX) == 0
