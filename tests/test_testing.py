"""``toolq.testing.TestWorker``: real messages from real Redis, run in this process."""

from __future__ import annotations

import json
import pickle
import threading
import time

import pytest

from tests.apps import registry
from tests.conftest import make_settings
from toolq import CallStatus, Client, EventType
from toolq.errors import WaitTimeoutError
from toolq.keys import KOMBU_UNACKED, KOMBU_UNACKED_INDEX, Keys
from toolq.models import RiskLevel
from toolq.testing import TestWorker


def call(name: str, call_id: str = "c1", **arguments: object) -> list[dict[str, object]]:
    return [{"id": call_id, "name": name, "arguments": arguments}]


def executions(r, call_id: str) -> int:
    return int(r.llen(f"test:exec:{call_id}"))


def test_drain_runs_queued_calls_and_leaves_nothing_unacked(client, settings, r):
    batch = client.dispatch(call("echo", "e1", text="hi") + call("add", "a1", a=2, b=3))
    assert r.llen(Keys().queue_for(RiskLevel.SAFE)) == 1
    with TestWorker(settings, registry) as worker:
        assert worker.drain() == 2
        assert worker.drain() == 0
    results = batch.wait(timeout=1)
    assert [x.status for x in results] == [CallStatus.SUCCEEDED, CallStatus.SUCCEEDED]
    assert results[1].output == 5
    assert [e.type for e in client.events(batch.run_id) if e.call_id == batch.call_ids[0]] == [
        EventType.QUEUED,
        EventType.STARTED,
        EventType.SUCCEEDED,
    ]
    assert r.hlen(KOMBU_UNACKED) == 0 and r.zcard(KOMBU_UNACKED_INDEX) == 0
    assert all(r.llen(Keys().queue_for(level)) == 0 for level in RiskLevel)


def test_drain_takes_only_its_levels(client, settings, r):
    batch = client.dispatch(call("echo", "e1", text="hi") + call("add", "a1", a=1, b=1))
    with TestWorker(settings, registry, levels=[RiskLevel.MODERATE]) as worker:
        assert worker.drain() == 1
    assert client.result(batch.call_ids[0]).status is CallStatus.QUEUED
    assert client.result(batch.call_ids[1]).status is CallStatus.SUCCEEDED


def test_a_running_call_holds_its_message_in_unacked_and_the_sweeper_leaves_it(client, r):
    # redeliver_after far below the call's run: were the message not in kombu's unacked
    # bookkeeping while it runs, the sweeper's lost and stranded checks would re-send it.
    settings = make_settings(redeliver_after=0.1)
    batch = client.dispatch(call("slow", "s1", seconds=1.5))
    worker = TestWorker(settings, registry)
    try:
        thread = threading.Thread(target=worker.drain)
        thread.start()
        deadline = time.monotonic() + 5
        while client.result(batch.call_ids[0]).status is not CallStatus.RUNNING:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        [(tag, raw)] = r.hgetall(KOMBU_UNACKED).items()
        assert json.loads(raw)[0]["headers"]["task"] == "toolq.execute"
        assert r.zscore(KOMBU_UNACKED_INDEX, tag) is not None
        first = worker.sweep()
        time.sleep(1.1)  # past LOST_CONFIRM: a second sweep would confirm a lost message
        second = worker.sweep()
        thread.join(10)
        assert not thread.is_alive()
        assert first["lost"] == second["lost"] == 0
        assert first["stranded"] == second["stranded"] == 0
        assert r.hlen(KOMBU_UNACKED) == 0
        assert worker.drain() == 0  # nothing was sent again
    finally:
        worker.close()
    assert batch.wait(timeout=1)[0].status is CallStatus.SUCCEEDED
    assert executions(r, batch.call_ids[0]) == 1


def test_approved_call_runs_on_the_next_drain_and_sweep_expires_overdue(client, settings, r):
    parked = client.dispatch(call("wipe", "w1", target="x") + call("hurry", "h1"))
    assert {c.status for c in parked.calls} == {CallStatus.AWAITING_APPROVAL}
    with TestWorker(settings, registry) as worker:
        assert worker.drain() == 0
        client.approvals.approve(parked.call_ids[0], by="alice")
        assert worker.drain() == 1
        assert client.result(parked.call_ids[0]).status is CallStatus.SUCCEEDED
        time.sleep(1.1)  # past hurry's 1 s approval deadline
        assert worker.sweep()["expired"] == 1
    assert client.result(parked.call_ids[1]).status is CallStatus.EXPIRED
    assert executions(r, parked.call_ids[1]) == 0


def test_drain_settle_picks_up_calls_enqueued_meanwhile(client, settings):
    batches = []
    with TestWorker(settings, registry) as worker:
        late = call("echo", "l1", text="x")
        timer = threading.Timer(0.2, lambda: batches.append(client.dispatch(late)))
        timer.start()
        assert worker.drain(settle=1.0) == 1
        timer.join()
    assert batches[0].wait(timeout=1)[0].status is CallStatus.SUCCEEDED


def test_run_in_thread_serves_dispatch_then_wait_with_maintenance(settings, r):
    with TestWorker(settings, registry) as worker, Client(registry, settings) as client:
        with worker.run_in_thread(concurrency=2):
            batch = client.dispatch(
                call("slow", "p1", seconds=0.3) + call("slow", "p2", seconds=0.3)
            )
            results = batch.wait(timeout=5)
            assert r.exists(Keys().worker(worker.hostname))  # the heartbeat of maintenance
        assert [x.status for x in results] == [CallStatus.SUCCEEDED] * 2
        assert not r.exists(Keys().worker(worker.hostname))  # withdrawn at stop
        # both calls in one message (calls_per_message); the busy slot gave the second back
        assert worker.processed == 2


def test_undo_and_preview_messages_run_too(client, settings, r, tmp_path):
    path = tmp_path / "f.txt"
    path.write_text("old")
    batch = client.dispatch(call("edit_file", "f1", path=str(path), content="new"))
    with TestWorker(settings, registry) as worker:
        worker.drain()  # the preview message
        assert client.approvals.get(batch.call_ids[0]).preview is not None
        client.approvals.approve(batch.call_ids[0], by="alice")
        worker.drain()
        assert path.read_text() == "new"
        with pytest.raises(WaitTimeoutError):
            client.undo(batch.call_ids[0], timeout=0.2)  # requested; nothing drains yet
        assert worker.drain() == 1
    assert path.read_text() == "old"
    assert EventType.UNDONE in [e.type for e in client.events(batch.run_id)]


def test_a_message_for_an_unknown_task_is_dropped(settings, r):
    with TestWorker(settings, registry) as worker:
        worker.app.send_task("not.a.toolq.task", args=[], queue=worker.queues[0])
        assert worker.drain() == 1
        assert worker.processed == 0
        assert r.llen(worker.queues[0]) == 0 and r.hlen(KOMBU_UNACKED) == 0


def test_drain_times_out_when_the_queue_keeps_filling(client, settings):
    with TestWorker(settings, registry) as worker:
        stop = threading.Event()

        def feed() -> None:
            n = 0
            while not stop.is_set():
                client.dispatch(call("noop", f"n{n}"))
                n += 1

        feeder = threading.Thread(target=feed)
        feeder.start()
        try:
            with pytest.raises(TimeoutError):
                worker.drain(timeout=0.5, settle=10)
        finally:
            stop.set()
            feeder.join()


class Exploit:
    """Unpickling this writes a file: proof that a pickle message was decoded."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (open, (self.path, "w"))


def test_pickle_messages_are_refused_and_never_unpickled(client, settings, r, tmp_path):
    marker = tmp_path / "pwned"
    batch = client.dispatch(call("echo", "e1", text="hi"))
    r.delete(Keys().queue_for(RiskLevel.SAFE))  # only the forged messages are queued
    with client.celery.connection_for_write() as conn:
        producer = conn.Producer()
        bodies = (pickle.dumps(((batch.call_ids[0],), {}, {})), pickle.dumps(Exploit(str(marker))))
        for body in bodies:
            producer.publish(
                body,
                routing_key="toolq.safe",
                exchange="",  # straight to the queue: no worker declared the exchange yet
                content_type="application/x-python-serialize",
                content_encoding="binary",
                headers={"task": "toolq.execute", "id": "forged", "lang": "py"},
            )
    with TestWorker(settings, registry) as worker:
        assert worker.drain() == 2
        assert worker.processed == 0
    assert not marker.exists()
    assert client.result(batch.call_ids[0]).status is CallStatus.QUEUED
    assert r.hlen(KOMBU_UNACKED) == 0
