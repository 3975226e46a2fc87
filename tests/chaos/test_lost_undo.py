"""An undo is run once: lost undo messages are sent again, duplicates and dead workers handled.

The undo's message is pushed by the script that marks it requested, with the same push
bookkeeping as a call's message, so the sweeper finds one taken off its queue and never
recorded in kombu's ``unacked`` (``resend_lost_undos``). A worker claims an undo under a
lease (requested → undoing): any other delivery does nothing. A worker killed during an
undo fails it ``worker_lost`` within about a lease, unless its tool is idempotent.
Ground truth: Redis lists written by the undo handlers themselves.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator

import pytest
import redis

from tests.chaos.test_lost_delivery import pop_and_die
from tests.conftest import Workers
from toolq import CallStatus, Client, RiskLevel, Settings
from toolq.errors import WaitTimeoutError
from toolq.keys import KOMBU_UNACKED, Keys
from toolq.models import Event, EventType

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(150)]

UNDO_APP = {"TOOLQ_APP": "tests.chaos.undo_app:registry"}
UNDO_EVENTS = (EventType.UNDONE, EventType.UNDO_FAILED)
keys = Keys()


@pytest.fixture
def undo_client(settings: Settings) -> Iterator[Client]:
    from tests.chaos.undo_app import registry

    with Client(registry, settings.model_copy(update={"app": UNDO_APP["TOOLQ_APP"]})) as c:
        yield c


def stop(proc: subprocess.Popen[bytes]) -> None:
    """Warm shutdown of a worker this test started (its process group), and wait for it."""
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(30)


def request_undo(client: Client, call_id: str) -> None:
    """Request the undo without waiting for it (no worker runs it yet)."""
    with pytest.raises(WaitTimeoutError):
        client.undo(call_id, timeout=0.3)


def undo_state(r: redis.Redis, call_id: str) -> str | None:
    value = r.hget(keys.call(call_id), "undo_state")
    return value.decode() if value is not None else None


def wait_undo_state(r: redis.Redis, call_id: str, state: str, timeout: float = 40) -> float:
    """Seconds until the call's undo reached ``state``; fails past ``timeout``."""
    start = time.monotonic()
    while undo_state(r, call_id) != state:
        assert time.monotonic() - start < timeout, f"undo still {undo_state(r, call_id)}"
        time.sleep(0.05)
    return time.monotonic() - start


def undo_events(client: Client, run_id: str, call_id: str) -> list[Event]:
    return [e for e in client.events(run_id) if e.call_id == call_id and e.type in UNDO_EVENTS]


def drained(r: redis.Redis, queue: str, timeout: float = 30) -> None:
    """Wait until ``queue`` is empty and kombu holds no unacknowledged message."""
    deadline = time.monotonic() + timeout
    while r.llen(queue) or r.hlen(KOMBU_UNACKED):
        assert time.monotonic() < deadline, (r.llen(queue), r.hlen(KOMBU_UNACKED))
        time.sleep(0.05)


def deployed(client: Client, workers: Workers, n: int) -> list[str]:
    """``n`` finished ``deploy`` calls (approved by alice) with undo data; no worker left."""
    runner = workers.start("dangerous")
    batch = client.dispatch(
        [{"id": f"d{i}", "name": "deploy", "arguments": {"service": "api", "replicas": i}}
         for i in range(n)]
    )  # fmt: skip
    for call_id in batch.call_ids:
        client.approvals.approve(call_id, by="alice")
    assert all(res.status is CallStatus.SUCCEEDED for res in batch.wait(timeout=30))
    stop(runner)
    return batch.call_ids


def slow_undoables(client: Client, workers: Workers, tool: str, seconds: float) -> str:
    """One finished call of ``tool`` (undo_app) whose undo takes ``seconds``; no worker left."""
    runner = workers.start("safe", **UNDO_APP)
    batch = client.dispatch([{"id": "s", "name": tool, "arguments": {"seconds": seconds}}])
    assert batch.wait(timeout=30)[0].status is CallStatus.SUCCEEDED
    stop(runner)
    return batch.call_ids[0]


def test_lost_undo_message_is_sent_again_and_undone_once(
    r: redis.Redis, client: Client, workers: Workers
) -> None:
    (call_id,) = deployed(client, workers, 1)
    request_undo(client, call_id)
    assert undo_state(r, call_id) == "requested" and r.llen("toolq.dangerous") == 1
    seq = int(r.hget(keys.call(call_id), "undo_push_seq"))
    assert r.zscore(keys.undo_queued, call_id) is not None

    pop_and_die(client.settings.redis_url, "toolq.dangerous")  # taken, never recorded
    assert r.llen("toolq.dangerous") == 0 and r.hlen(KOMBU_UNACKED) == 0

    workers.start("dangerous", TOOLQ_REDELIVER_AFTER="2")
    recovery = wait_undo_state(r, call_id, "undone")
    drained(r, "toolq.dangerous")
    time.sleep(1)
    assert r.lrange("test:undo:deploy", 0, -1) == [call_id.encode()]  # ran once
    assert int(r.hget(keys.call(call_id), "undo_push_seq")) == seq + 1  # sent once more
    assert r.zscore(keys.undo_queued, call_id) is None  # UNDO_START took it out
    assert not r.exists(keys.undo(call_id))  # undo data gone once undone
    run_id = client.result(call_id).run_id
    assert [e.type for e in undo_events(client, run_id, call_id)] == [EventType.UNDONE]
    print(f"lost undo recovered in {recovery:.1f} s")


def test_duplicate_and_unrequested_undo_messages_do_nothing(
    r: redis.Redis, client: Client, workers: Workers
) -> None:
    a, b = deployed(client, workers, 2)
    request_undo(client, a)
    message = r.lindex("toolq.dangerous", 0)
    r.lpush("toolq.dangerous", message)  # the same message delivered again (same tag)
    _, copy = client.publisher.undo_message(a, RiskLevel.DANGEROUS)
    r.lpush("toolq.dangerous", copy)  # another copy under its own delivery tag
    _, forged = client.publisher.undo_message(b, RiskLevel.DANGEROUS)
    r.lpush("toolq.dangerous", forged)  # an undo of b that nobody requested
    assert r.llen("toolq.dangerous") == 4

    workers.start("dangerous", concurrency=2)
    workers.start("dangerous", concurrency=2)
    wait_undo_state(r, a, "undone")
    drained(r, "toolq.dangerous")
    time.sleep(1)
    assert r.lrange("test:undo:deploy", 0, -1) == [a.encode()]  # a once, b never
    run_id = client.result(a).run_id
    assert [e.type for e in undo_events(client, run_id, a)] == [EventType.UNDONE]
    assert undo_events(client, run_id, b) == []
    assert undo_state(r, b) is None and r.exists(keys.undo(b))  # untouched

    # b's undo, requested, runs as usual.
    assert client.undo(b, timeout=30).type is EventType.UNDONE
    assert r.lrange("test:undo:deploy", 0, -1) == [a.encode(), b.encode()]


def test_copies_delivered_during_a_slow_undo_do_nothing(
    r: redis.Redis, undo_client: Client, workers: Workers
) -> None:
    call_id = slow_undoables(undo_client, workers, "slow_undoable", 2)
    request_undo(undo_client, call_id)
    message = r.lindex("toolq.safe", 0)
    r.lpush("toolq.safe", message, message)
    _, copy = undo_client.publisher.undo_message(call_id, RiskLevel.SAFE)
    r.lpush("toolq.safe", copy)
    # Four threads take all four copies at once: one claims, three find it undoing.
    workers.start("safe", concurrency=4, **UNDO_APP)
    wait_undo_state(r, call_id, "undone")
    drained(r, "toolq.safe")
    time.sleep(1)
    assert r.llen(f"test:undo:{call_id}") == 1 and r.llen(f"test:undone:{call_id}") == 1
    run_id = undo_client.result(call_id).run_id
    assert [e.type for e in undo_events(undo_client, run_id, call_id)] == [EventType.UNDONE]


def test_worker_killed_during_undo_fails_it_worker_lost_and_never_reruns(
    r: redis.Redis, undo_client: Client, workers: Workers
) -> None:
    call_id = slow_undoables(undo_client, workers, "slow_undoable", 30)
    workers.start("dangerous", **UNDO_APP)  # sweeps; never takes a safe message
    runner = workers.start("safe", **UNDO_APP)
    request_undo(undo_client, call_id)
    deadline = time.monotonic() + 30
    while r.llen(f"test:undo:{call_id}") < 1:  # the handler started
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert undo_state(r, call_id) == "undoing"
    workers.kill9(runner)
    killed = time.monotonic()

    wait_undo_state(r, call_id, "failed", timeout=30)
    recovery = time.monotonic() - killed
    lease = undo_client.settings.lease_seconds
    assert recovery < lease + 5, recovery  # about one lease, not kombu's visibility timeout
    run_id = undo_client.result(call_id).run_id
    (event,) = undo_events(undo_client, run_id, call_id)
    assert event.type is EventType.UNDO_FAILED and event.data["error_type"] == "worker_lost"

    workers.start("safe", **UNDO_APP)  # would take any copy sent again
    time.sleep(4)
    assert r.llen(f"test:undo:{call_id}") == 1 and r.llen(f"test:undone:{call_id}") == 0
    assert undo_state(r, call_id) == "failed" and r.zcard(keys.undoing) == 0
    assert r.exists(keys.undo(call_id))  # kept: someone may request the undo again
    print(f"undo of a killed worker failed worker_lost {recovery:.1f} s after the kill")


def test_worker_killed_during_idempotent_undo_runs_it_again(
    r: redis.Redis, undo_client: Client, workers: Workers
) -> None:
    call_id = slow_undoables(undo_client, workers, "slow_undoable_idempotent", 3)
    workers.start("dangerous", **UNDO_APP)  # sweeps; never takes a safe message
    runner = workers.start("safe", **UNDO_APP)
    request_undo(undo_client, call_id)
    deadline = time.monotonic() + 30
    while r.llen(f"test:undo:{call_id}") < 1:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    workers.kill9(runner)
    wait_undo_state(r, call_id, "requested", timeout=30)  # recovered, sent again
    assert r.hget(keys.call(call_id), "undo_recoveries") == b"1"

    workers.start("safe", **UNDO_APP)
    wait_undo_state(r, call_id, "undone")
    assert r.llen(f"test:undo:{call_id}") == 2 and r.llen(f"test:undone:{call_id}") == 1
    run_id = undo_client.result(call_id).run_id
    assert [e.type for e in undo_events(undo_client, run_id, call_id)] == [EventType.UNDONE]


def test_undos_waiting_behind_a_backlog_are_not_sent_again(
    r: redis.Redis, undo_client: Client, workers: Workers
) -> None:
    from tests.chaos.undo_app import registry

    finished = [slow_undoables(undo_client, workers, "slow_undoable", 0) for _ in range(3)]
    # A backlog of 30 messages (one per call) in front of the undo messages.
    unbatched = undo_client.settings.model_copy(update={"calls_per_message": 1})
    with Client(registry, unbatched) as one_per_message:
        backlog = one_per_message.dispatch(
            [
                {"id": f"b{i}", "name": "slow_undoable", "arguments": {"seconds": 0}}
                for i in range(30)
            ]
        )
        for call_id in finished:
            request_undo(undo_client, call_id)
        pushes = int(r.get(keys.queue_pushes("toolq.safe")))
        seqs = [r.hget(keys.call(c), "undo_push_seq") for c in finished]
        assert r.llen("toolq.safe") == 33

        workers.start("dangerous", TOOLQ_REDELIVER_AFTER="1", **UNDO_APP)  # sweeps only
        time.sleep(5)  # many sweeps, every undo past the threshold
        assert int(r.get(keys.queue_pushes("toolq.safe"))) == pushes  # nothing re-sent
        assert [r.hget(keys.call(c), "undo_push_seq") for c in finished] == seqs
        assert r.llen("toolq.safe") == 33 and not r.keys(keys.lost_undo_suspect("*"))
        assert [undo_state(r, c) for c in finished] == ["requested"] * 3

        workers.start("safe", concurrency=4, **UNDO_APP)
        assert all(res.status is CallStatus.SUCCEEDED for res in backlog.wait(timeout=60))
        for call_id in finished:
            wait_undo_state(r, call_id, "undone")
            assert r.llen(f"test:undo:{call_id}") == 1
        assert r.zcard(keys.undo_queued) == 0
