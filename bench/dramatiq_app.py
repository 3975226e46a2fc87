"""The dramatiq app of the comparison: a no-op actor on a Redis broker, results in Redis.

``dramatiq bench.dramatiq_app:setup --processes 2 --threads 1`` runs its worker: each worker
process calls ``setup``, which builds the broker on ``BENCH_REDIS_URL`` and marks the process
ready in Redis (``READY_PREFIX`` + pid) so the benchmark knows when all of them are up.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import dramatiq
import redis
from dramatiq.brokers.redis import RedisBroker
from dramatiq.results import Results
from dramatiq.results.backends.redis import RedisBackend

QUEUE = "bench"
READY_PREFIX = "bench:dramatiq:ready:"


def _noop() -> None:
    return None


@dataclass
class DramatiqApp:
    """A broker, its result backend and the no-op actor declared on it."""

    broker: RedisBroker
    backend: RedisBackend
    noop: Any


def make_dramatiq(redis_url: str) -> DramatiqApp:
    """A Redis broker with the Results middleware (Redis backend) and the no-op actor on it."""
    broker = RedisBroker(url=redis_url)
    backend = RedisBackend(url=redis_url)
    broker.add_middleware(Results(backend=backend))
    actor = dramatiq.actor(
        _noop,
        actor_name="noop",
        queue_name=QUEUE,
        broker=broker,
        store_results=True,
        max_retries=0,
    )
    return DramatiqApp(broker, backend, actor)


def setup() -> None:
    """Make the broker on ``BENCH_REDIS_URL`` the global one; mark this process ready."""
    url = os.environ["BENCH_REDIS_URL"]
    dramatiq.set_broker(make_dramatiq(url).broker)
    client = redis.Redis.from_url(url)
    client.set(f"{READY_PREFIX}{os.getpid()}", "1", ex=3600)
    client.close()
