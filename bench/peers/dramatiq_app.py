"""The dramatiq app of the comparison: a no-op and a sleeping actor on a Redis broker,
results in Redis.

``dramatiq bench.peers.dramatiq_app:setup [--processes P --threads T]`` runs its worker: each worker
process calls ``setup``, which builds the broker on ``BENCH_REDIS_URL`` and marks the process
ready in Redis (``READY_PREFIX`` + pid) so the benchmark knows when all of them are up.
"""

from __future__ import annotations

import os
import time
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


def _nap(seconds: float) -> None:
    time.sleep(seconds)


@dataclass
class DramatiqApp:
    """A broker, its result backend and the actors declared on it."""

    broker: RedisBroker
    backend: RedisBackend
    noop: Any
    nap: Any


def make_dramatiq(redis_url: str) -> DramatiqApp:
    """A Redis broker with the Results middleware (Redis backend) and the actors on it."""
    broker = RedisBroker(url=redis_url)
    backend = RedisBackend(url=redis_url)
    broker.add_middleware(Results(backend=backend))
    actors = [
        dramatiq.actor(
            fn,
            actor_name=name,
            queue_name=QUEUE,
            broker=broker,
            store_results=True,
            max_retries=0,
        )
        for fn, name in ((_noop, "noop"), (_nap, "nap"))
    ]
    return DramatiqApp(broker, backend, *actors)


def setup() -> None:
    """Make the broker on ``BENCH_REDIS_URL`` the global one; mark this process ready."""
    url = os.environ["BENCH_REDIS_URL"]
    dramatiq.set_broker(make_dramatiq(url).broker)
    client = redis.Redis.from_url(url)
    client.set(f"{READY_PREFIX}{os.getpid()}", "1", ex=3600)
    client.close()
