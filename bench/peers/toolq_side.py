"""toolq as a ``Side``: ``toolq worker`` on ``bench.peers.apps:registry`` and a ``Client`` of it.

Round trip: ``client.call("noop", {})``. Batch: one ``client.dispatch`` of M calls, then
``batch.wait()``.
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from pathlib import Path
from types import TracebackType
from typing import Any

from bench.peers.apps import registry
from bench.procs import READY_TIMEOUT, Procs, worker_env
from toolq import Client, Settings
from toolq.cli.check import live_workers, missing_queues
from toolq.models import CallStatus, RiskLevel
from toolq.quotas import DEFAULT_TENANT

APP = "bench.peers.apps:registry"


def toolq_argv(
    pool: str, concurrency: int, app: str = APP, hostname: str = "", prefetch: int = 0
) -> list[str]:
    """``toolq worker`` serving ``app`` on the SAFE queue (Celery node ``hostname``, if given;
    ``prefetch``: its ``--prefetch`` multiplier, 0 for toolq's default)."""
    named = ["--hostname", hostname] if hostname else []
    named += ["--prefetch", str(prefetch)] if prefetch else []
    return [
        sys.executable,
        "-m",
        "toolq",
        "worker",
        "--app",
        app,
        "--risk",
        "safe",
        "--pool",
        pool,
        "--concurrency",
        str(concurrency),
        "--loglevel",
        "warning",
        *named,
    ]


class ToolqWorker:
    """A ``toolq worker`` on ``bench.peers.apps:registry`` and a ``Client`` of it (a ``Side``)."""

    name = "toolq"
    batch_how = "client.dispatch([M calls]) + batch.wait()"

    def __init__(
        self,
        procs: Procs,
        redis_url: str,
        *,
        pool: str = "prefork",
        concurrency: int = 2,
        log: Path | None = None,
        wrap: list[str] | None = None,
        tenants: dict[str, Any] | None = None,
        tenant: str = DEFAULT_TENANT,
        app: str = APP,
        env: dict[str, str] | None = None,
        processes: int = 1,
        prefetch: int = 0,
    ) -> None:
        self.procs = procs
        self.redis_url = redis_url
        # ``wrap``: a command prefix for the worker, e.g. ``["taskset", "-c", "1"]``.
        # ``app``: another module serving ``bench.peers.apps:registry`` (e.g. with probes), and
        # ``env`` what it reads.
        # ``processes``: that many ``toolq worker``s of ``pool -c concurrency`` each, named apart
        # (one per core is how a threads pool uses every core, as dramatiq's ``-p``).
        names = [f"w{i}@%h" for i in range(processes)] if processes > 1 else [""]
        self.argvs = [
            [*(wrap or []), *toolq_argv(pool, concurrency, app, n, prefetch)] for n in names
        ]
        self.env = env or {}
        self.log = log
        # ``tenants``: TOOLQ_TENANTS of the worker and the client; ``tenant``: the batches'.
        self.tenants = tenants
        self.tenant = tenant
        self.settings = Settings(redis_url=redis_url, tenants=tenants or {})
        self.client = Client(registry, self.settings)
        self.procs_started: list[Any] = []
        self.last_run_id = ""
        """The run of the last ``batch`` (to look at its keys afterwards)."""

    @property
    def proc(self) -> Any:
        """The first worker process (``procs_started``: all of them), ``None`` once stopped."""
        return self.procs_started[0] if self.procs_started else None

    def __enter__(self) -> ToolqWorker:
        env = {**worker_env(self.redis_url), **self.env}
        if self.tenants is not None:
            env["TOOLQ_TENANTS"] = json.dumps(self.tenants)
        self.procs_started = [self.procs.start(argv, env, self.log) for argv in self.argvs]
        try:
            self._wait_ready()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Release the client's connections and stop the worker."""
        self.client.close()
        for proc in self.procs_started:
            self.procs.stop(proc)
        self.procs_started = []

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT
        while missing_queues(self.settings, [RiskLevel.SAFE]) or len(
            live_workers(self.settings)
        ) < len(self.procs_started):
            for proc in self.procs_started:
                if proc.poll() is not None:
                    raise RuntimeError(f"toolq worker exited with {proc.returncode}")
            if time.monotonic() > deadline:
                raise RuntimeError("toolq worker not ready in time")
            time.sleep(0.1)

    def round_trip(self) -> None:
        """``client.call("noop", {})``."""
        result = self.client.call("noop", {}, timeout=30)
        if result.status is not CallStatus.SUCCEEDED:
            raise RuntimeError(f"noop did not succeed: {result}")

    def batch(self, size: int, timeout: float) -> tuple[float, float]:
        """One ``client.dispatch`` of ``size`` noop calls, then ``batch.wait()``."""
        payload = [
            {"id": f"call_{uuid.uuid4().hex}", "name": "noop", "arguments": {}} for _ in range(size)
        ]
        t0 = time.perf_counter()
        batch = self.client.dispatch(payload, tenant=self.tenant)
        t1 = time.perf_counter()
        self.last_run_id = batch.run_id
        results = batch.wait(timeout=timeout)
        t2 = time.perf_counter()
        bad = [r for r in results if r.status is not CallStatus.SUCCEEDED]
        if bad:
            raise RuntimeError(f"{len(bad)} batch calls did not succeed, e.g. {bad[0]}")
        return t1 - t0, t2 - t0
