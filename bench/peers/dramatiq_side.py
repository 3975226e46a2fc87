"""dramatiq as a ``Side``: ``dramatiq [--processes P] [--threads T]`` and a client in this process.

``processes`` / ``threads`` left ``None`` are not passed, so dramatiq's own defaults apply
(``DEFAULTS`` reads them from its command-line parser: CPU count and 8 in dramatiq 2.2).

Round trip: ``actor.send()`` + ``message.get_result(block=True)`` (the Redis result backend
blocks on ``BRPOPLPUSH``, so the wait itself does not poll). Batch: M ``send()`` calls, then
``get_result(block=True)`` on each message in order.

The worker side is dramatiq's own: its Redis consumer polls an empty queue with an
exponential backoff (5 ms doubling, jittered, capped at the worker timeout, 1 s by default),
which is part of what a round trip costs on dramatiq.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import dramatiq

from bench.peers.dramatiq_app import READY_PREFIX, make_dramatiq
from bench.procs import READY_TIMEOUT, Procs, wait_for_keys, worker_env

RESULT_TIMEOUT_MS = 30_000


def dramatiq_defaults() -> dict[str, int]:
    """The processes and threads dramatiq's CLI uses when given neither (this install)."""
    from dramatiq.cli import make_argument_parser

    parsed = make_argument_parser().parse_args(["bench.peers.dramatiq_app:setup"])  # type: ignore[no-untyped-call]
    return {"processes": int(parsed.processes), "threads": int(parsed.threads)}


class DramatiqWorker:
    """A dramatiq worker (``processes`` processes of ``threads`` threads) and its client."""

    name = "dramatiq"
    batch_how = "actor.send() x M, then message.get_result(block=True) for each"

    def __init__(
        self,
        procs: Procs,
        redis_url: str,
        *,
        processes: int | None = None,
        threads: int | None = None,
        log: Path | None = None,
    ) -> None:
        self.version = dramatiq.__version__
        self.procs = procs
        self.redis_url = redis_url
        defaults = dramatiq_defaults()
        self.processes_arg = processes
        self.threads_arg = threads
        self.processes = defaults["processes"] if processes is None else processes
        self.threads = defaults["threads"] if threads is None else threads
        self.log = log
        self.app = make_dramatiq(redis_url)
        self.proc: Any = None

    @property
    def argv(self) -> list[str]:
        """The worker's command line."""
        argv = [sys.executable, "-m", "dramatiq", "bench.peers.dramatiq_app:setup"]
        if self.processes_arg is not None:
            argv += ["--processes", str(self.processes_arg)]
        if self.threads_arg is not None:
            argv += ["--threads", str(self.threads_arg)]
        return argv

    def __enter__(self) -> DramatiqWorker:
        self.proc = self.procs.start(self.argv, worker_env(self.redis_url), self.log)
        try:
            wait_for_keys(self.redis_url, READY_PREFIX, self.processes, [self.proc], READY_TIMEOUT)
            self.app.noop.send().get_result(
                backend=self.app.backend, block=True, timeout=int(READY_TIMEOUT * 1000)
            )
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
        self.app.broker.close()
        self.app.backend.client.close()

    def _result(self, message: Any) -> None:
        message.get_result(backend=self.app.backend, block=True, timeout=RESULT_TIMEOUT_MS)

    def round_trip(self) -> None:
        """``noop.send()`` + ``get_result(block=True)``."""
        self._result(self.app.noop.send())

    def batch(self, size: int, timeout: float) -> tuple[float, float]:
        """``size`` ``send()`` calls, then every result in order."""
        t0 = time.perf_counter()
        messages = [self.app.noop.send() for _ in range(size)]
        t1 = time.perf_counter()
        for message in messages:
            self._result(message)
            if time.perf_counter() - t0 > timeout:
                raise TimeoutError(f"dramatiq batch of {size} not done after {timeout:g}s")
        t2 = time.perf_counter()
        return t1 - t0, t2 - t0
