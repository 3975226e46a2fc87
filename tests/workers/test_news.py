"""The ``async def`` calls' news (progress, retrying) is written off the worker's event loop."""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
import redis

from tests.apps import registry
from tests.conftest import InProcess, Workers, make_settings
from toolq import CallStatus, Client, Settings
from toolq.cli.stack import EmbeddedRedis
from toolq.models import CallEnvelope, EventType
from toolq.results.connection import redis_client
from toolq.results.store import CallStore
from toolq.workers import news as news_module
from toolq.workers.news import News, NewsWriter

CANCELLED = {"error": "cancelled before it started", "error_type": "cancelled"}


def news(call_id: str, n: int) -> News:
    envelope = CallEnvelope(call_id=call_id, run_id="r", tool_call_id=call_id, name="t")
    return News(envelope, "token", EventType.PROGRESS, json.dumps({"n": n}))


def test_news_is_written_in_the_order_it_was_queued_and_flush_waits_for_a_calls_news() -> None:
    written: list[tuple[str, int]] = []
    gate = threading.Event()

    def write(batch: Sequence[News]) -> None:
        gate.wait(5)
        written.extend((item.envelope.call_id, json.loads(item.data)["n"]) for item in batch)

    writer = NewsWriter(write)
    for n in range(50):
        writer.put(news("a" if n % 2 else "b", n))
    flushed = threading.Event()
    waiter = threading.Thread(target=lambda: (writer.flush(["a"]), flushed.set()))
    waiter.start()
    assert not flushed.wait(0.2)  # the writer is held: a's news is not written yet
    gate.set()
    assert flushed.wait(5)
    waiter.join(5)
    writer.flush(["b"])
    assert written == [("a" if n % 2 else "b", n) for n in range(50)]
    writer.flush(["never-queued"])  # nothing to wait for
    writer.stop()


def test_a_script_error_in_a_round_trip_writes_the_other_news_once(
    r: redis.Redis, settings: Settings
) -> None:
    """The round trip runs every event's script: one that errs (its call's record broken)
    fails only its own, and the others are in the stream once, in order, not sent again."""
    client = Client(registry, settings)
    store = CallStore(redis_client(settings.redis_url), settings)
    gate = threading.Event()

    def write(batch: Sequence[News]) -> None:
        gate.wait(5)  # the first round trip is held: the next one carries all the others
        store.progress_many([(n.envelope, n.token, n.etype, n.data) for n in batch])

    writer = NewsWriter(write)
    try:
        batch = client.dispatch(
            [{"id": i, "name": "echo", "arguments": {"text": i}} for i in ("a", "b")]
        )
        a, b = (store.start(c, "tok", CANCELLED, batch.run_id).envelope for c in batch.call_ids)
        assert a is not None and b is not None
        r.delete(store.keys.call(b.call_id))
        r.set(store.keys.call(b.call_id), "not a hash")  # b's PROGRESS errs (WRONGTYPE)
        for envelope, n in [(a, 0), (a, 1), (b, 1), (a, 2)]:
            writer.put(News(envelope, "tok", EventType.PROGRESS, json.dumps({"n": n})))
        gate.set()
        writer.flush([a.call_id, b.call_id])
        written = [
            (fields[b"call_id"].decode(), json.loads(fields[b"data"])["n"])
            for _, fields in r.xrange(store.keys.run_stream(batch.run_id))
            if fields[b"type"] == b"call.progress"
        ]
        assert written == [(a.call_id, 0), (a.call_id, 1), (a.call_id, 2)]
    finally:
        writer.stop()
        client.close()


def test_an_async_handlers_progress_holds_what_it_reported_then(
    inproc: InProcess, client: Client
) -> None:
    """A handler that reports a dict and changes it right after: each event holds the dict as
    it was when reported, though the writer sends it later."""
    inproc.start()
    batch = client.dispatch([{"id": "t", "name": "tally", "arguments": {"n": 50}}])
    [result] = batch.wait(timeout=30)
    assert result.status == CallStatus.SUCCEEDED, result
    reported = [e.data["data"] for e in client.events(batch.run_id) if e.type == EventType.PROGRESS]
    assert reported == [{"count": i} for i in range(50)]


def test_news_past_the_queue_bound_is_dropped_not_waited_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(news_module, "MAX_QUEUED", 3)
    release = threading.Event()
    written: list[int] = []

    def write(batch: Sequence[News]) -> None:
        release.wait(5)
        written.extend(json.loads(item.data)["n"] for item in batch)

    writer = NewsWriter(write)
    started = time.monotonic()
    for n in range(10):
        writer.put(news("a", n))
    assert time.monotonic() - started < 1  # never waits for the writer
    release.set()
    writer.flush(["a"])
    assert 3 <= len(written) < 10 and written == sorted(written)
    writer.stop()


def test_news_past_the_bytes_bound_is_dropped_and_round_trips_stay_small(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A tool streaming large progress faster than Redis takes it: what is queued past the
    byte bound is dropped, and each round trip carries about ``BATCH_BYTES``, not all."""
    monkeypatch.setattr(news_module, "MAX_QUEUED_BYTES", 10_000)
    monkeypatch.setattr(news_module, "BATCH_BYTES", 3_000)
    release = threading.Event()
    sizes: list[int] = []
    written: list[int] = []

    def write(batch: Sequence[News]) -> None:
        release.wait(5)
        sizes.append(sum(len(item.data) for item in batch))
        written.extend(json.loads(item.data)["n"] for item in batch)

    def big(n: int) -> News:
        return News(news("a", n).envelope, "token", EventType.PROGRESS,
                    json.dumps({"n": n, "pad": "x" * 990}))  # fmt: skip

    writer = NewsWriter(write)
    for n in range(40):  # 40 KB queued while the writer is held: most dropped
        writer.put(big(n))
    release.set()
    writer.flush(["a"])
    assert 9 <= len(written) <= 12 and written == sorted(written)
    assert len(sizes) > 1 and max(sizes) <= 3_000 + 1_010
    writer.put(big(99))  # room again once written
    writer.flush(["a"])
    assert written[-1] == 99
    writer.stop()


@pytest.fixture
def paused_redis(tmp_path: Path) -> Iterator[EmbeddedRedis]:
    server = EmbeddedRedis(directory=str(tmp_path))
    server.start()
    yield server
    assert server.process is not None
    server.process.send_signal(signal.SIGCONT)
    server.process.send_signal(signal.SIGKILL)
    server.process.wait(10)


@pytest.mark.e2e
@pytest.mark.timeout(120)
def test_a_redis_that_hangs_holds_up_no_coroutine_through_another_calls_progress(
    paused_redis: EmbeddedRedis, tmp_path: Path
) -> None:
    """An async generator streams progress while Redis is stopped (SIGSTOP): the worker's
    event loop goes on (another call's sleeps stay on time), and once Redis is back every
    progress event is in the stream, in order, before the call's end."""
    flag = tmp_path / "ticking"
    workers = Workers(make_settings(redis_url=paused_redis.url, lease_seconds=30.0))
    client = Client(registry, workers.settings)
    try:
        workers.start(concurrency=4, log=tmp_path / "worker.log")
        batch = client.dispatch(
            [
                {
                    "id": "tick",
                    "name": "loop_lateness",
                    "arguments": {"seconds": 4.0, "flag": str(flag)},
                },
                {"id": "count", "name": "countdown", "arguments": {"n": 200}},
            ]
        )
        probe = redis.Redis.from_url(paused_redis.url)
        stream = client.store.keys.run_stream(batch.run_id)
        deadline = time.monotonic() + 60  # headroom for a loaded machine: not what is checked
        while not (flag.exists() and _progress(probe, stream)):
            assert time.monotonic() < deadline, "the calls did not start"
            time.sleep(0.02)
        assert paused_redis.process is not None
        paused_redis.process.send_signal(signal.SIGSTOP)
        time.sleep(1.5)
        paused_redis.process.send_signal(signal.SIGCONT)
        results = batch.wait(timeout=60)
        assert [r.status for r in results] == [CallStatus.SUCCEEDED] * 2, results
        assert results[0].output < 0.75, f"the loop was held up {results[0].output:.2f} s"
        events = [
            (fields[b"type"].decode(), json.loads(fields[b"data"]))
            for _, fields in probe.xrange(stream)
            if fields[b"call_id"].decode() == results[1].call_id
        ]
        progress = [data["data"] for kind, data in events if kind == "call.progress"]
        steps = [step["left"] for step in progress if "left" in step]
        assert steps == list(range(200, 0, -1))
        assert events[-1][0] == "call.succeeded"
    finally:
        client.close()
        workers.stop_all()


def _progress(probe: redis.Redis, stream: str) -> bool:
    return any(fields[b"type"] == b"call.progress" for _, fields in probe.xrange(stream))
