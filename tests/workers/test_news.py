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

from tests.conftest import Workers, make_settings
from toolq import CallStatus, Client
from toolq.cli.stack import EmbeddedRedis
from toolq.models import CallEnvelope, EventType
from toolq.workers import news as news_module
from toolq.workers.news import News, NewsWriter


def news(call_id: str, n: int) -> News:
    envelope = CallEnvelope(call_id=call_id, run_id="r", tool_call_id=call_id, name="t")
    return News(envelope, "token", EventType.PROGRESS, {"n": n})


def test_news_is_written_in_the_order_it_was_queued_and_flush_waits_for_a_calls_news() -> None:
    written: list[tuple[str, int]] = []
    gate = threading.Event()

    def write(batch: Sequence[News]) -> None:
        gate.wait(5)
        written.extend((item.envelope.call_id, item.data["n"]) for item in batch)

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


def test_a_failed_write_drops_only_the_news_at_fault() -> None:
    written: list[int] = []

    def write(batch: Sequence[News]) -> None:
        if any(item.data["n"] == 3 for item in batch):  # a script's error fails its round trip
            raise redis.ResponseError("ERR user_script:1: a bug")
        written.extend(item.data["n"] for item in batch)

    writer = NewsWriter(write)
    for n in range(6):
        writer.put(news("a", n))
    writer.flush(["a"])
    assert written == [0, 1, 2, 4, 5]
    writer.stop()


def test_news_past_the_queue_bound_is_dropped_not_waited_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(news_module, "MAX_QUEUED", 3)
    release = threading.Event()
    written: list[int] = []

    def write(batch: Sequence[News]) -> None:
        release.wait(5)
        written.extend(item.data["n"] for item in batch)

    writer = NewsWriter(write)
    started = time.monotonic()
    for n in range(10):
        writer.put(news("a", n))
    assert time.monotonic() - started < 1  # never waits for the writer
    release.set()
    writer.flush(["a"])
    assert 3 <= len(written) < 10 and written == sorted(written)
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
    from tests.apps import registry

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
