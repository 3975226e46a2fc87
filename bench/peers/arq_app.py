"""The arq app of the comparison: a no-op job function and the worker's settings.

Loaded only by arq's own virtualenv (``bench/.venvs/arq``; arq pins ``redis<6``, toolq needs
``redis>=6.1``):
``arq bench.peers.arq_app.WorkerSettings --custom-log-dict bench.peers.arq_app.LOG_CONFIG``.
``WorkerSettings`` is built on first use from ``BENCH_REDIS_URL`` and ``BENCH_ARQ_POLL_DELAY``
(seconds between the worker's polls of the queue; arq's default is 0.5). Each worker process
marks itself ready in Redis (``READY_PREFIX`` + pid) once it is connected. The module imports
arq only when the settings are built, so toolq's environment can read ``READY_PREFIX``.
"""

from __future__ import annotations

import os
from typing import Any

READY_PREFIX = "bench:arq:ready:"

# arq logs every job at INFO; the other workers run at WARNING, so this one does too.
LOG_CONFIG: dict[str, Any] = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"stderr": {"level": "WARNING", "class": "logging.StreamHandler"}},
    "loggers": {"arq": {"handlers": ["stderr"], "level": "WARNING"}},
}


async def noop(ctx: dict[str, Any]) -> None:
    """Do nothing."""
    return None


async def _mark_ready(ctx: dict[str, Any]) -> None:
    await ctx["redis"].set(f"{READY_PREFIX}{os.getpid()}", "1", ex=3600)


def worker_settings() -> dict[str, Any]:
    """arq ``Worker`` keyword arguments: the no-op function, the bench Redis, the poll delay."""
    # Imported here so that toolq's environment, which has no arq, can read READY_PREFIX.
    from arq.connections import RedisSettings

    return {
        "functions": [noop],
        "redis_settings": RedisSettings.from_dsn(os.environ["BENCH_REDIS_URL"]),
        "poll_delay": float(os.environ.get("BENCH_ARQ_POLL_DELAY", "0.5")),
        "on_startup": _mark_ready,
    }


def __getattr__(name: str) -> dict[str, Any]:
    """``WorkerSettings`` is read from the environment when arq's CLI asks for it."""
    if name == "WorkerSettings":
        return worker_settings()
    raise AttributeError(name)
