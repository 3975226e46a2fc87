"""Raw Celery as a ``Side``: ``celery worker`` on ``bench.peers.apps:raw_celery`` and a client.

Round trip: ``apply_async(...).get()``. Batch: M ``apply_async`` on one producer connection,
collected with ``ResultSet.join_native()`` (results read in bulk from the Redis backend).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from celery.result import ResultSet

from bench.peers.apps import RAW_QUEUE, RAW_TASK, make_raw_celery
from bench.procs import READY_TIMEOUT, Procs, worker_env

JOIN_INTERVAL = 0.005
"""``join_native``'s wait between checks (Celery's default is 0.5 s): with the default a
batch's collection can sit idle for up to half a second after its last result arrived,
which is most of a 10-call batch's time."""


def raw_argv(pool: str, concurrency: int) -> list[str]:
    """``celery worker`` for the raw app: queue ``bench.raw``, prefetch 4, no gossip/mingle."""
    argv = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "bench.peers.apps:raw_celery",
        "worker",
        "--queues",
        RAW_QUEUE,
        "--pool",
        pool,
        "--concurrency",
        str(concurrency),
        "--loglevel",
        "warning",
        "--hostname",
        f"bench-raw-{os.getpid()}@%h",
        "--prefetch-multiplier",
        "4",
        "--without-gossip",
        "--without-mingle",
    ]
    if pool == "solo":
        argv.remove("--concurrency")
        argv.remove(str(concurrency))
    return argv


class RawCeleryWorker:
    """A plain ``celery worker`` on the raw app and a client of it (a ``Side``)."""

    name = "raw celery"
    batch_how = f"apply_async x M on one producer + ResultSet.join_native(interval={JOIN_INTERVAL})"

    def __init__(
        self,
        procs: Procs,
        redis_url: str,
        *,
        pool: str = "prefork",
        concurrency: int = 2,
        log: Path | None = None,
        wrap: list[str] | None = None,
    ) -> None:
        self.procs = procs
        self.redis_url = redis_url
        # ``wrap``: a command prefix for the worker, e.g. ``["taskset", "-c", "1"]``.
        self.argv = [*(wrap or []), *raw_argv(pool, concurrency)]
        self.log = log
        self.app = make_raw_celery(redis_url)
        self.task = self.app.tasks[RAW_TASK]
        self.proc: Any = None

    def __enter__(self) -> RawCeleryWorker:
        self.proc = self.procs.start(self.argv, worker_env(self.redis_url), self.log)
        try:
            # Readiness: the first round trip blocks until the worker consumes.
            self._send().get(timeout=READY_TIMEOUT)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Stop the worker and release the client's connections."""
        if self.proc is not None:
            self.procs.stop(self.proc)
            self.proc = None
        self.app.close()

    def _send(self, producer: Any = None) -> Any:
        return self.task.apply_async(queue=RAW_QUEUE, producer=producer)

    def round_trip(self) -> None:
        """``apply_async(...).get()``."""
        self._send().get(timeout=30)

    def batch(self, size: int, timeout: float) -> tuple[float, float]:
        """``size`` ``apply_async`` on one producer, then ``ResultSet.join_native()``."""
        t0 = time.perf_counter()
        with self.app.producer_or_acquire() as producer:
            results = [self._send(producer) for _ in range(size)]
        t1 = time.perf_counter()
        ResultSet(results, app=self.app).join_native(timeout=timeout, interval=JOIN_INTERVAL)
        t2 = time.perf_counter()
        return t1 - t0, t2 - t0
