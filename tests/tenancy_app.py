"""Tools with fleet-wide limits for the fair-share and admission tests; each records in Redis."""

from __future__ import annotations

import functools
import json
import os
import time

import redis

from toolq import ToolContext, ToolRegistry
from toolq.results.connection import redis_client

registry = ToolRegistry()

CAPPED = "tenancy:capped"
"""List of ``[call_id, start, end]`` of every ``capped`` execution."""
DONE = "tenancy:done"
"""List of the ``tag`` of every ``work`` call, in the order they finished."""


@functools.cache
def _redis() -> redis.Redis:
    return redis_client(os.environ.get("TOOLQ_REDIS_URL") or os.environ["TOOLQ_TEST_REDIS_URL"])


def started(ctx: ToolContext) -> None:
    _redis().set(f"tenancy:started:{ctx.call_id}", repr(time.time()))


@registry.tool(concurrency=2)
def capped(seconds: float, ctx: ToolContext) -> str:
    begin = time.time()
    time.sleep(seconds)
    _redis().rpush(CAPPED, json.dumps([ctx.call_id, begin, time.time()]))
    return ctx.call_id


@registry.tool(rate_limit="5/s")
def limited(n: int) -> int:
    return n


@registry.tool()
def work(tag: str, seconds: float = 0.05) -> str:
    time.sleep(seconds)
    _redis().rpush(DONE, tag)
    return tag


@registry.tool(concurrency=1)
def solo(seconds: float, ctx: ToolContext) -> str:
    started(ctx)
    time.sleep(seconds)
    return ctx.call_id


@registry.tool(concurrency=1, requires_approval=True)
def gated_solo(ctx: ToolContext) -> str:
    started(ctx)
    return ctx.call_id


@registry.tool(concurrency=1, idempotent=True)
def solo_idempotent(seconds: float, ctx: ToolContext) -> str:
    started(ctx)
    time.sleep(seconds)
    return ctx.call_id
