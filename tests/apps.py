"""Tool registry used by end-to-end tests (loaded by real worker processes)."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator

import redis

from toolq import RiskLevel, ToolContext, ToolRegistry

registry = ToolRegistry()


def _redis() -> redis.Redis:
    return redis.Redis.from_url(os.environ["TOOLQ_REDIS_URL"])


def record(ctx: ToolContext, tag: str = "") -> int:
    """Count an execution of this call in Redis (the tests' ground truth)."""
    client = _redis()
    client.rpush(f"test:exec:{ctx.call_id}", f"{os.getpid()}:{tag}")
    return int(client.llen(f"test:exec:{ctx.call_id}"))


@registry.tool()
def echo(text: str) -> dict[str, str]:
    """Echo the text back."""
    return {"text": text}


@registry.tool()
def noop() -> None:
    """Do nothing."""


@registry.tool(risk=RiskLevel.MODERATE)
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@registry.tool(risk=RiskLevel.DANGEROUS)
def wipe(target: str, ctx: ToolContext) -> str:
    """Pretend to wipe a target (records the execution)."""
    record(ctx, "wipe")
    return f"wiped {target}"


@registry.tool()
def slow(seconds: float, ctx: ToolContext) -> str:
    """Sleep (cooperatively cancellable), recording the execution."""
    record(ctx, "slow")
    if ctx.wait_cancelled(seconds):
        return "interrupted"
    return "slept"


@registry.tool(idempotent=True)
def slow_idempotent(seconds: float, ctx: ToolContext) -> str:
    """Like slow, but safe to run twice."""
    record(ctx, "slow_idempotent")
    if ctx.wait_cancelled(seconds):
        return "interrupted"
    return "slept"


@registry.tool(timeout=0.5)
async def too_slow(ctx: ToolContext) -> str:
    """Sleeps past its own time limit."""
    await asyncio.sleep(5)
    return "never"


@registry.tool()
async def async_sleeper(seconds: float) -> str:
    """Async sleep; cancellation cancels the coroutine."""
    await asyncio.sleep(seconds)
    return "done"


class Transient(ConnectionError):
    """A failure worth retrying."""


@registry.tool(retries=3, retry_on=(Transient,))
def flaky(failures: int, ctx: ToolContext) -> str:
    """Fails `failures` times with a transient error, then succeeds."""
    count = record(ctx, "flaky")
    if count <= failures:
        raise Transient(f"transient failure {count}")
    return f"ok after {count}"


@registry.tool()
async def countdown(n: int) -> AsyncIterator[object]:
    """Streams n progress steps, then a final value."""
    for i in range(n, 0, -1):
        yield {"left": i}
        await asyncio.sleep(0.01)
    yield {"done": True}


@registry.tool()
def shell_sleep(seconds: int, ctx: ToolContext) -> str:
    """Runs `sleep` in a child process group (killed on cancel)."""
    proc = ctx.popen(["sh", "-c", f"sleep {int(seconds)} & sleep {int(seconds)}; wait"])
    _redis().set(f"test:pgid:{ctx.call_id}", proc.pid)
    proc.wait()
    return f"exit {proc.returncode}"


@registry.tool()
def boom() -> None:
    """Always fails."""
    raise RuntimeError("kaboom")


@registry.tool()
def sleep_then(seconds: float) -> float:
    """Blocking sleep (not cancellable)."""
    time.sleep(seconds)
    return seconds
