"""The taskiq app of the agent benchmark: a no-op task on taskiq-redis, results in Redis.

``taskiq worker bench.peers.taskiq_app:broker`` runs its worker (taskiq's defaults: 2
processes, up to 100 async tasks each); the broker reads ``BENCH_REDIS_URL`` at import.
``ListQueueBroker`` is taskiq-redis's plain list queue (``LPUSH`` / ``BRPOP``), the broker
its README starts with; ``RedisAsyncResultBackend`` stores each result under its task id.
"""

from __future__ import annotations

import os
from typing import Any

from taskiq_redis import ListQueueBroker, RedisAsyncResultBackend

TASK = "bench.taskiq.noop"
QUEUE = "bench.taskiq"


async def _noop() -> None:
    return None


def make_taskiq(url: str) -> tuple[Any, Any]:
    """A list-queue broker on ``url`` with the Redis result backend, and its no-op task."""
    made = ListQueueBroker(url, queue_name=QUEUE).with_result_backend(
        RedisAsyncResultBackend(url, result_ex_time=3600)
    )
    return made, made.register_task(_noop, task_name=TASK)


broker, noop = make_taskiq(os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0"))
