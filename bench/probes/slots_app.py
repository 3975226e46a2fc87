"""Tools of ``bench.probes.slots``: CPU-bound, sleeping (counted while running), rate limited."""

from __future__ import annotations

import functools
import os
import time

import redis

from toolq import ToolRegistry
from toolq.results.connection import redis_client

registry = ToolRegistry()

RUNNING = "probe:running"
"""Counter of ``nap`` calls running now."""
SEEN = "probe:seen"
"""List of the counter's values each ``nap`` saw as it started."""
PIDS = "probe:pids"
"""List of the process ids of every ``burn`` call."""


@functools.cache
def _redis() -> redis.Redis:
    return redis_client(os.environ["TOOLQ_REDIS_URL"])


@registry.tool()
def burn(seconds: float) -> int:
    """Spend ``seconds`` of CPU; record the process that ran it."""
    _redis().rpush(PIDS, os.getpid())
    end = time.thread_time() + seconds
    n = 0
    while time.thread_time() < end:
        n += 1
    return n


@registry.tool()
def nap(seconds: float) -> str:
    """Sleep, counted as running."""
    _redis().rpush(SEEN, _redis().incr(RUNNING))
    try:
        time.sleep(seconds)
    finally:
        _redis().decr(RUNNING)
    return "slept"


@registry.tool(rate_limit="4/s")
def tick(n: int) -> int:
    """Do nothing, four times a second at most."""
    return n
