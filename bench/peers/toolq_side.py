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
from toolq.cli.check import missing_queues
from toolq.models import CallStatus, RiskLevel
from toolq.quotas import DEFAULT_TENANT

APP = "bench.peers.apps:registry"


def toolq_argv(pool: str, concurrency: int, app: str = APP) -> list[str]:
    """``toolq worker`` serving ``app`` on the SAFE queue."""
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
    ) -> None:
        self.procs = procs
        self.redis_url = redis_url
        # ``wrap``: a command prefix for the worker, e.g. ``["taskset", "-c", "1"]``.
        # ``app``: another module serving ``bench.peers.apps:registry`` (e.g. with probes), and
        # ``env`` what it reads.
        self.argv = [*(wrap or []), *toolq_argv(pool, concurrency, app)]
        self.env = env or {}
        self.log = log
        # ``tenants``: TOOLQ_TENANTS of the worker and the client; ``tenant``: the batches'.
        self.tenants = tenants
        self.tenant = tenant
        self.settings = Settings(redis_url=redis_url, tenants=tenants or {})
        self.client = Client(registry, self.settings)
        self.proc: Any = None
        self.last_run_id = ""
        """The run of the last ``batch`` (to look at its keys afterwards)."""

    def __enter__(self) -> ToolqWorker:
        env = {**worker_env(self.redis_url), **self.env}
        if self.tenants is not None:
            env["TOOLQ_TENANTS"] = json.dumps(self.tenants)
        self.proc = self.procs.start(self.argv, env, self.log)
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
        if self.proc is not None:
            self.procs.stop(self.proc)
            self.proc = None

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT
        while missing_queues(self.settings, [RiskLevel.SAFE]):
            if self.proc.poll() is not None:
                raise RuntimeError(f"toolq worker exited with {self.proc.returncode}")
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
