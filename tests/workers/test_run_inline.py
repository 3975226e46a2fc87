"""``run_inline``: a worker slot's synchronous call run without a turn of its event loop."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Iterator
from typing import Any

import pytest

from toolq import CallStatus, Executor, Middleware, ToolContext, ToolRegistry
from toolq.execution.executor import run_inline

seen: contextvars.ContextVar[str] = contextvars.ContextVar("seen", default="")


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def test_a_call_that_never_waits_runs_on_the_callers_stack_with_the_loop_running(
    loop: asyncio.AbstractEventLoop,
) -> None:
    registry = ToolRegistry()
    inside: dict[str, Any] = {}

    @registry.tool
    def plain() -> str:
        inside["loop"] = asyncio.get_running_loop()
        inside["task"] = asyncio.current_task()
        return "done"

    executor = Executor(registry)
    assert not executor.needs_task("plain")
    result = run_inline(executor.execute("plain", {}, ToolContext(call_id="c")), loop)
    assert (result.status, result.output) == (CallStatus.SUCCEEDED, "done")
    # The loop is the running one, as under run_until_complete, yet no task ran the call.
    assert inside == {"loop": loop, "task": None}
    with pytest.raises(RuntimeError):
        asyncio.get_running_loop()  # and it is no longer running once the call returns


def test_a_call_that_waits_goes_on_as_a_task_of_the_loop_in_the_same_context(
    loop: asyncio.AbstractEventLoop,
) -> None:
    registry = ToolRegistry()
    attempts: list[tuple[int, str, bool]] = []

    @registry.tool(retries=2, retry_on=(ConnectionError,))
    def flaky(ctx: ToolContext) -> str:
        # The first attempt runs inline; the backoff waits, so the second runs in a task.
        attempts.append((ctx.attempt, seen.get(), asyncio.current_task() is not None))
        seen.set(f"attempt {ctx.attempt}")
        if ctx.attempt < 2:
            raise ConnectionError("down")
        return "up"

    executor = Executor(registry, retry_backoff=0.01)
    assert not executor.needs_task("flaky")
    result = run_inline(executor.execute("flaky", {}, ToolContext(call_id="c")), loop)
    assert (result.status, result.output, result.attempts) == (CallStatus.SUCCEEDED, "up", 2)
    assert attempts == [(1, "", False), (2, "attempt 1", True)]
    assert seen.get() == ""  # the call's context was a copy, as a task's is


def test_an_error_and_a_cancel_after_a_wait_reach_the_caller(
    loop: asyncio.AbstractEventLoop,
) -> None:
    async def fails_later() -> None:
        await asyncio.sleep(0)
        raise ValueError("boom")

    async def cancelled_later() -> None:
        await asyncio.sleep(0)
        task = asyncio.current_task()
        assert task is not None
        task.cancel()
        await asyncio.sleep(1)

    with pytest.raises(ValueError, match="boom"):
        run_inline(fails_later(), loop)
    with pytest.raises(asyncio.CancelledError):
        run_inline(cancelled_later(), loop)


class Nothing(Middleware):
    pass


def test_calls_that_may_need_a_task_before_they_wait_are_told_apart() -> None:
    registry = ToolRegistry()

    @registry.tool
    def plain() -> None: ...

    @registry.tool(timeout=5)
    def timed() -> None: ...

    @registry.tool
    async def coroutine() -> None: ...

    executor = Executor(registry)
    assert not executor.needs_task("plain")
    assert executor.needs_task("timed")
    assert executor.needs_task("coroutine")
    assert Executor(registry, default_timeout=30).needs_task("plain")
    registry.use(Nothing())
    assert executor.needs_task("plain")  # any middleware hook may need one
