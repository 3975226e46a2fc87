"""kombu's ``unacked`` bookkeeping on a threads worker: no ``MULTI``, no round trip for the ack.

A message's entry is written without ``MULTI`` when it is taken, and removed in the round
trip of its last FINISH.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import redis

from tests.conftest import Workers
from toolq import CallStatus, Client, Settings
from toolq.keys import KOMBU_UNACKED, KOMBU_UNACKED_INDEX


def _monitor(settings: Settings, seen: list[tuple[str, list[str]]], stop: threading.Event) -> None:
    """Every command Redis runs, as ``(client address, words)``, until ``stop``."""
    with redis.Redis.from_url(settings.redis_url).monitor() as monitor:
        while not stop.is_set():
            command: Any = monitor.next_command()
            who = f"{command['client_address']}:{command['client_port']}"
            seen.append((who, str(command["command"]).split()))


def test_the_ack_rides_behind_the_last_finish(
    client: Client, workers: Workers, settings: Settings, r: redis.Redis
) -> None:
    # kombu would acknowledge each message with a round trip of its own (MULTI ZREM HDEL
    # EXEC) after the task returns. Each message's entry goes instead on the connection of
    # its last FINISH, right behind it, with no MULTI around it.
    workers.start("safe", pool="threads", concurrency=4)
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


def test_a_worker_killed_while_acks_ride_with_held_finishes_loses_nothing(
    client: Client, workers: Workers, r: redis.Redis, wait_for: Callable[..., None]
) -> None:
    # The calls' handlers return while Redis holds writes: each FINISH waits with its
    # message's ZREM and HDEL behind it. The worker dies then (kill -9): the entries stay
    # with the calls running, so nothing is lost; each call is recovered after its lease,
    # runs again (the tool is idempotent) and ends once, succeeded.
    doomed = workers.start("safe", pool="threads", concurrency=4)
    batches = [
        client.dispatch([{"id": "a", "name": "slow_idempotent", "arguments": {"seconds": 0.5}}])
        for _ in range(4)
    ]
    call_ids = [batch.call_ids[0] for batch in batches]
    wait_for(lambda: all(r.llen(f"test:exec:{c}") == 1 for c in call_ids), timeout=30)
    assert r.hlen(KOMBU_UNACKED) == 4
    r.execute_command("CLIENT", "PAUSE", 5000, "WRITE")
    try:
        time.sleep(1.5)  # the handlers return: FINISH and ack wait on Redis together
        workers.kill9(doomed)
    finally:
        r.execute_command("CLIENT", "UNPAUSE")
    assert client.store.statuses(call_ids) == [CallStatus.RUNNING] * 4
    assert r.hlen(KOMBU_UNACKED) == 4  # no ack outlived the process that held it
    workers.start("safe", pool="threads", concurrency=4)
    for batch in batches:
        assert [res.status for res in batch.wait(timeout=60)] == [CallStatus.SUCCEEDED]
    for batch, call_id in zip(batches, call_ids, strict=True):
        finals = [e.type.value for e in client.events(batch.run_id) if e.type.is_final]
        assert finals == ["call.succeeded"], finals
        assert r.llen(f"test:exec:{call_id}") == 2
