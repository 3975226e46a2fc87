"""Apps the benchmark workers load.

``registry``: a toolq registry (``toolq worker --app bench.peers.apps:registry``) with a no-op tool,
a no-op that needs approval (``gated``), a progress emitter (``ticker``) and two sleepers for
the I/O-bound case (``nap``, blocking; ``anap``, ``async def``; ``anap_stamped``, ``anap`` that
says where and when it slept, for ``bench.probes.async_timeline``).
``raw_celery``: a minimal plain Celery app with a no-op task and a sleeping one (``nap``),
configured like toolq's (JSON only, late acks) plus a Redis result backend; its broker/backend
URL comes from ``BENCH_REDIS_URL`` (``celery -A bench.peers.apps:raw_celery worker``).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator

from celery import Celery

from toolq import ToolRegistry

RAW_QUEUE = "bench.raw"
RAW_TASK = "bench.raw.noop"
RAW_NAP = "bench.raw.nap"

registry = ToolRegistry()


@registry.tool()
def noop() -> None:
    """Do nothing."""


@registry.tool(requires_approval=True)
def gated() -> None:
    """Do nothing, once approved."""


@registry.tool()
def nap(seconds: float) -> None:
    """Sleep ``seconds`` (an I/O-bound call that holds its execution slot)."""
    time.sleep(seconds)


@registry.tool()
async def anap(seconds: float) -> None:
    """Sleep ``seconds`` on the event loop (an I/O-bound async call)."""
    await asyncio.sleep(seconds)


@registry.tool()
async def anap_stamped(seconds: float) -> dict[str, float]:
    """``anap`` that returns its process id and when its sleep began and ended (``time.time``)."""
    began = time.time()
    await asyncio.sleep(seconds)
    return {"pid": os.getpid(), "began": began, "ended": time.time()}


@registry.tool()
async def ticker(count: int, interval: float = 0.0) -> AsyncIterator[dict[str, float]]:
    """Yield ``count`` progress values, each stamped with the time it was produced."""
    for i in range(count):
        yield {"i": i, "produced": time.time()}
        if interval:
            await asyncio.sleep(interval)


def make_raw_celery(redis_url: str) -> Celery:
    """A plain Celery app on ``redis_url`` (broker and result backend)."""
    app = Celery("bench_raw", broker=redis_url, backend=redis_url, set_as_current=False)
    app.conf.update(
        task_serializer="json",
        accept_content=["json"],
        result_serializer="json",
        event_serializer="json",
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        task_default_queue=RAW_QUEUE,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        worker_send_task_events=False,
    )

    # Not shared: each app built in one process (the benchmarks build several) keeps its own.
    @app.task(name=RAW_TASK, shared=False)  # type: ignore[untyped-decorator]
    def noop() -> None:
        return None

    @app.task(name=RAW_NAP, shared=False)  # type: ignore[untyped-decorator]
    def nap(seconds: float) -> None:
        time.sleep(seconds)

    return app


_raw: Celery | None = None


def __getattr__(name: str) -> Celery:
    """``raw_celery`` is built on first use, so importing ``registry`` builds no Celery app."""
    global _raw
    if name == "raw_celery":
        if _raw is None:
            _raw = make_raw_celery(os.environ["BENCH_REDIS_URL"])
        return _raw
    raise AttributeError(name)
