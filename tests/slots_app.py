"""Tools of the slot tests: each records how many calls of its kind run at once, and where.

``nap`` and ``anap`` count themselves in a Redis counter while they run (``INCR`` before,
``DECR`` after) and push each value they saw: the most calls running at once, exactly,
whatever the machine's load. ``burn`` spends CPU and records its process id.
"""

from __future__ import annotations

import asyncio
import functools
import os
import time

import redis

from toolq import ToolRegistry
from toolq.results.connection import redis_client

registry = ToolRegistry()

RUNNING = "slots:running:{kind}"
"""Counter of the calls of a kind running now."""
SEEN = "slots:seen:{kind}"
"""List of the counter's values each call saw as it started."""
PIDS = "slots:pids"
"""List of the process ids of every ``burn`` call."""
TICKS = "slots:ticks"
"""List of the start times (s) of every ``tick`` call."""


@functools.cache
def _redis() -> redis.Redis:
    return redis_client(os.environ.get("TOOLQ_REDIS_URL") or os.environ["TOOLQ_TEST_REDIS_URL"])


def most_at_once(client: redis.Redis, kind: str) -> int:
    """The most calls of ``kind`` that ran at once."""
    return max((int(x) for x in client.lrange(SEEN.format(kind=kind), 0, -1)), default=0)


def _enter(kind: str) -> None:
    _redis().rpush(SEEN.format(kind=kind), _redis().incr(RUNNING.format(kind=kind)))


def _leave(kind: str) -> None:
    _redis().decr(RUNNING.format(kind=kind))


@registry.tool()
def nap(seconds: float) -> str:
    """Sleep, counted as running."""
    _enter("sync")
    try:
        time.sleep(seconds)
    finally:
        _leave("sync")
    return "slept"


@registry.tool()
async def anap(seconds: float) -> str:
    """Sleep asynchronously, counted as running."""
    _enter("async")
    try:
        await asyncio.sleep(seconds)
    finally:
        _leave("async")
    return "slept"


@registry.tool()
def burn(seconds: float) -> int:
    """Spend ``seconds`` of CPU; record the process that ran it."""
    _redis().rpush(PIDS, os.getpid())
    end = time.thread_time() + seconds
    n = 0
    while time.thread_time() < end:
        n += 1
    return n


@registry.tool(rate_limit="10/s")
def tick(n: int) -> int:
    """Record when it started (rate limited)."""
    _redis().rpush(TICKS, repr(time.time()))
    return n
