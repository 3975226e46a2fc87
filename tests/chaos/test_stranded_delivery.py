"""A worker that dies holding a message it took from the broker but never started.

Found by the chaos harness (``bench/chaos``): kombu moves a message into its ``unacked``
hash as it hands it to the worker. A worker killed before starting the call (kill -9, or
the Celery consumer crashing on a Redis restart) leaves the call ``queued`` with its only
message in that hash, which kombu restores only after its visibility timeout (above an
hour). The sweeper sends such messages again (``Sweeper.resend_stranded``).

Here the "worker" is a bare kombu consumer that takes the message without acknowledging it
and is SIGKILLed, which is exactly that window, made deterministic.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from bench.chaos.app import registry
from bench.chaos.faults import WorkerPool, WorkerSpec
from bench.chaos.server import PrivateRedis
from toolq import CallStatus, Client, Settings

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

TAKE_AND_HANG = """
import sys, time
from kombu import Connection
with Connection(sys.argv[1]) as conn:
    message = conn.default_channel.basic_get("toolq.safe", no_ack=False)
    print("took" if message is not None else "empty", flush=True)
    time.sleep(600)
"""


def test_call_taken_by_a_worker_that_died_before_recording_it_is_resent(tmp_path: Path) -> None:
    server = PrivateRedis(tmp_path / "redis")
    server.start()
    settings = Settings(redis_url=server.url, app="bench.chaos.app:registry")
    client = Client(registry, settings)
    pool = WorkerPool(
        [WorkerSpec("w0", "safe", "threads", 1)],
        server.url,
        tmp_path,
        {"TOOLQ_LEASE_SECONDS": "2", "TOOLQ_SWEEP_INTERVAL": "0.2",
         "TOOLQ_HEARTBEAT_SECONDS": "0.5", "TOOLQ_REDELIVER_AFTER": "3"},
    )  # fmt: skip
    taker = None
    try:
        batch = client.dispatch([{"id": "a", "name": "fast_echo", "arguments": {"text": "x"}}])
        taker = subprocess.Popen(
            [sys.executable, "-c", TAKE_AND_HANG, server.url], stdout=subprocess.PIPE, text=True
        )
        assert taker.stdout is not None and taker.stdout.readline().strip() == "took"
        taker.send_signal(signal.SIGKILL)
        taker.wait(10)
        r = redis.Redis.from_url(server.url)
        assert r.hlen("unacked") == 1 and r.llen("toolq.safe") == 0
        pool.start_all()
        deadline = time.monotonic() + 30
        while client.result(batch.call_ids[0]).status in (CallStatus.QUEUED, CallStatus.RUNNING):
            assert time.monotonic() < deadline, "the call is not final after 30 s"
            time.sleep(0.2)
        assert client.result(batch.call_ids[0]).status is CallStatus.SUCCEEDED
    finally:
        if taker is not None and taker.poll() is None:
            taker.kill()
        client.close()
        pool.stop_all()
        server.stop()
