"""``Executor``: runs one call in process: validate, hooks, handler, retries, time limit.

No Redis and no Celery in here: workers wrap it in one task, and ``registry.invoke`` uses
it directly.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import random
import threading
import time
import weakref
from asyncio import events as asyncio_events
from collections.abc import Callable, Coroutine, Generator
from typing import TYPE_CHECKING, Any, TypeVar

from toolq.errors import (
    CallCancelledError,
    ToolDeniedError,
    ToolFailureError,
    ToolNotFoundError,
    ToolqError,
    ToolTimeoutError,
)
from toolq.execution.context import ToolContext
from toolq.execution.middleware import resolve
from toolq.models import (
    AudioContent,
    CallResult,
    CallStatus,
    ImageContent,
    TextContent,
    ToolOutput,
    jsonable,
)

if TYPE_CHECKING:
    from toolq.registry.registry import ToolRegistry
    from toolq.registry.tool import Tool

RetryHook = Callable[[int, float, BaseException], None]
"""Called before each retry with (next attempt, delay seconds, the error)."""

_BLOCKS = (TextContent, ImageContent, AudioContent)
T = TypeVar("T")


def error_type(exc: BaseException) -> str:
    """Return the stable code of a toolq error, or the exception's class name."""
    return exc.code if isinstance(exc, ToolqError) else type(exc).__name__


def error_message(exc: BaseException) -> str:
    """Return a message for the model: the error text, or its class name if it has none."""
    text = str(exc)
    if isinstance(exc, ToolqError) or not text:
        return text or type(exc).__name__
    return f"{type(exc).__name__}: {text}"


class Executor:
    """Runs calls of one registry."""

    def __init__(
        self,
        registry: ToolRegistry,
        *,
        default_timeout: float | None = None,
        retry_backoff: float = 0.5,
        retry_backoff_max: float = 30.0,
    ) -> None:
        self.registry = registry
        self.default_timeout = default_timeout
        self.retry_backoff = retry_backoff
        self.retry_backoff_max = retry_backoff_max

    async def execute(
        self,
        name: str,
        arguments: dict[str, Any],
        ctx: ToolContext,
        *,
        on_retry: RetryHook | None = None,
        validated: bool = False,
        tool: Tool | None = None,
    ) -> CallResult:
        """Run one call to a final ``CallResult``; never raises for the call's own failures.

        ``tool``: the one the caller already looked up (by default, ``name``'s now).
        """
        started = time.perf_counter()
        attempts = 0
        try:
            tool = self.registry.require(name) if tool is None else tool
            self.registry.check_enabled(tool)
            kwargs = arguments if validated else tool.validate(arguments)
            for mw in self._chain(tool):
                rewritten = await resolve(mw.before_execute(ctx, tool, kwargs))
                if rewritten is not None:
                    kwargs = rewritten
            outcome: Any
            try:
                outcome, attempts = await self._attempts(tool, kwargs, ctx, on_retry)
            except BaseException as exc:
                if not isinstance(exc, Exception | asyncio.CancelledError):
                    raise
                outcome = (
                    CallCancelledError(f"call {ctx.call_id} was cancelled")
                    if isinstance(exc, asyncio.CancelledError)
                    else exc
                )
                attempts = max(ctx.attempt, 1)  # the attempt that failed last
            for mw in reversed(self._chain(tool)):
                outcome = await resolve(mw.after_execute(ctx, tool, outcome))
            return self._result(tool, ctx, outcome, attempts, started)
        except ToolNotFoundError as exc:
            return self._failure(name, ctx, exc, attempts, started)
        except ToolDeniedError as exc:
            return self._failure(name, ctx, exc, attempts, started, CallStatus.DENIED)
        except Exception as exc:
            return self._failure(name, ctx, exc, attempts, started)

    def _chain(self, tool: Tool) -> list[Any]:
        return [*self.registry.middleware, *tool.middleware]

    def needs_task(self, name: str, tool: Tool | None = None) -> bool:
        """Whether ``execute`` of a call of ``name`` may need an asyncio task before it waits.

        It does not for a synchronous handler with no time limit and no middleware: it
        awaits nothing until a retry's backoff, and ``run_inline`` can run it. A time limit
        (``asyncio.wait_for``, from Python 3.12) or a middleware hook may need
        ``asyncio.current_task()``. ``tool``: the one the call runs, when the caller looked
        it up already (by default, ``name``'s now).
        """
        tool = self.registry.get(name) if tool is None else tool
        if tool is None:
            return False
        timed = tool.run_timeout(self.default_timeout) is not None
        return timed or _is_async(tool) or bool(self._chain(tool))

    async def _attempts(
        self, tool: Tool, kwargs: dict[str, Any], ctx: ToolContext, on_retry: RetryHook | None
    ) -> tuple[Any, int]:
        max_attempts = 1 + max(0, tool.retries)
        attempt = max(1, ctx.attempt)
        while True:
            ctx.attempt = attempt
            try:
                return await self._run_once(tool, kwargs, ctx), attempt
            except Exception as exc:
                retryable = tool.retry_on and isinstance(exc, tool.retry_on)
                if not retryable or attempt >= max_attempts or ctx.cancelled:
                    if ctx.cancelled and not isinstance(exc, ToolTimeoutError):
                        raise CallCancelledError(f"call {ctx.call_id} was cancelled") from exc
                    raise
                delay = self._backoff(attempt)
                if on_retry is not None:
                    on_retry(attempt + 1, delay, exc)
                if await asyncio.to_thread(ctx.wait_cancelled, delay):
                    raise CallCancelledError(f"call {ctx.call_id} was cancelled") from exc
                attempt += 1

    def _backoff(self, attempt: int) -> float:
        base = min(self.retry_backoff * 2.0 ** (attempt - 1), self.retry_backoff_max)
        return base * random.uniform(0.8, 1.2)  # jitter, not crypto

    async def _run_once(self, tool: Tool, kwargs: dict[str, Any], ctx: ToolContext) -> Any:
        timeout = tool.run_timeout(self.default_timeout)
        ctx.check_cancelled()
        if timeout is None and not _is_async(tool):
            return await self._finish(tool.call_method("execute", kwargs, ctx), ctx)
        job = asyncio.ensure_future(self._invoke(tool, kwargs, ctx, threaded=timeout is not None))
        loop = asyncio.get_running_loop()

        def cancel_job() -> None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: the call is over
                loop.call_soon_threadsafe(job.cancel)

        ctx.on_cancel(cancel_job)
        try:
            return await asyncio.wait_for(job, timeout)
        except TimeoutError:
            ctx.cancel()
            raise ToolTimeoutError(
                f"{tool.name!r} timed out after {timeout:g}s", tool=tool.name, timeout=timeout
            ) from None
        except asyncio.CancelledError:
            if ctx.cancelled:
                raise CallCancelledError(f"call {ctx.call_id} was cancelled") from None
            raise

    async def _invoke(
        self, tool: Tool, kwargs: dict[str, Any], ctx: ToolContext, *, threaded: bool
    ) -> Any:
        if _is_async(tool):
            return await self._finish(tool.call_method("execute", kwargs, ctx), ctx)
        if threaded:
            value = await _in_thread(tool.call_method, "execute", kwargs, ctx)
        else:
            value = tool.call_method("execute", kwargs, ctx)
        return await self._finish(value, ctx)

    async def _finish(self, value: Any, ctx: ToolContext) -> Any:
        """Await coroutines and drain async generators (their yields are progress)."""
        if inspect.isawaitable(value):
            value = await value
        if inspect.isasyncgen(value):
            return await _drain(value, ctx)
        return value

    def _result(
        self, tool: Tool, ctx: ToolContext, outcome: Any, attempts: int, started: float
    ) -> CallResult:
        if isinstance(outcome, BaseException):
            cancelled = isinstance(outcome, CallCancelledError)
            status = CallStatus.CANCELLED if cancelled else CallStatus.FAILED
            return self._failure(tool.name, ctx, outcome, attempts, started, status)
        result = CallResult(
            call_id=ctx.call_id,
            tool_call_id=ctx.tool_call_id or ctx.call_id,
            name=tool.name,
            status=CallStatus.SUCCEEDED,
            attempts=attempts,
            run_id=ctx.run_id or None,
        )
        try:
            if isinstance(outcome, ToolOutput):
                if not outcome.success:
                    result.status = CallStatus.FAILED
                    result.error = outcome.error or "tool reported failure"
                    result.error_type = ToolFailureError.code
                data = tool.validate_output(outcome.data) if outcome.success else outcome.data
                result.output = jsonable(data)
                result.content = list(outcome.content)
                result.artifacts = [jsonable(a) for a in outcome.artifacts]
                result.undo = jsonable(outcome.undo_metadata) if outcome.undo_metadata else None
            elif isinstance(outcome, _BLOCKS):
                result.content = [outcome]
            elif _is_blocks(outcome):
                result.content = list(outcome)
            else:
                result.output = jsonable(tool.validate_output(outcome))
        except Exception as exc:
            return self._failure(tool.name, ctx, exc, attempts, started)
        if ctx.cancelled and result.status is CallStatus.SUCCEEDED:
            # The handler noticed the cancel and returned early: what it returned is partial.
            result.status = CallStatus.CANCELLED
            result.error = "cancelled while running; the tool stopped early"
            result.error_type = CallCancelledError.code
        result.duration_ms = (time.perf_counter() - started) * 1000
        return result

    def _failure(
        self,
        name: str,
        ctx: ToolContext,
        exc: BaseException,
        attempts: int,
        started: float,
        status: CallStatus = CallStatus.FAILED,
    ) -> CallResult:
        return CallResult(
            call_id=ctx.call_id,
            tool_call_id=ctx.tool_call_id or ctx.call_id,
            name=name,
            status=status,
            error=error_message(exc),
            error_type=error_type(exc),
            attempts=attempts,
            duration_ms=(time.perf_counter() - started) * 1000,
            run_id=ctx.run_id or None,
        )


def _is_blocks(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(b, _BLOCKS) for b in value)


async def _in_thread(func: Callable[..., Any], *args: Any) -> Any:
    """Run ``func`` in a daemon thread and await its value.

    Not ``asyncio.to_thread``: ``asyncio.run`` joins those threads on exit, so a sync
    handler that ignores its time limit would hold ``registry.invoke`` until it returned.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()
    context = contextvars.copy_context()

    def settle(value: Any, error: BaseException | None) -> None:
        if future.done():  # timed out or cancelled: nobody waits for it any more
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)

    def run() -> None:
        value: Any = None
        error: BaseException | None = None
        try:
            value = context.run(func, *args)
        except BaseException as exc:
            error = exc
        with contextlib.suppress(RuntimeError):  # the loop is closed
            loop.call_soon_threadsafe(settle, value, error)

    threading.Thread(target=run, name="toolq-handler", daemon=True).start()
    return await future


def run_inline(coro: Coroutine[Any, Any, T], loop: asyncio.AbstractEventLoop) -> T:
    """``loop.run_until_complete(coro)``, without a turn of the loop while ``coro`` does not wait.

    ``coro`` runs on this thread's stack until it first waits, with ``loop`` as the running
    loop (as under ``run_until_complete``) and in a copy of the current context (as a task);
    only then does it go on as a task of ``loop``. A synchronous handler's run never waits,
    and costs no task, no poll of the loop's selector and no callbacks. ``coro`` must not
    need ``asyncio.current_task()`` before it first waits (``Executor.needs_task``).
    """
    context = contextvars.copy_context()
    previous = asyncio_events._get_running_loop()
    asyncio_events._set_running_loop(loop)
    try:
        waiting = context.run(coro.send, None)
    except StopIteration as stop:
        value: T = stop.value
        return value
    finally:
        asyncio_events._set_running_loop(previous)
    return loop.run_until_complete(loop.create_task(_resumed(coro, waiting), context=context))


async def _resumed(coro: Coroutine[Any, Any, T], waiting: Any) -> T:
    """The rest of ``coro``, which waits on ``waiting``, as the body of a task."""
    value: T = await _Rest(coro, waiting)
    return value


class _Rest:
    """An awaitable that hands ``waiting`` and what follows from ``coro`` to the task."""

    def __init__(self, coro: Coroutine[Any, Any, Any], waiting: Any) -> None:
        self.coro = coro
        self.waiting = waiting

    def __await__(self) -> Generator[Any, Any, Any]:
        waiting = self.waiting
        while True:
            try:
                try:
                    answer = yield waiting
                except BaseException as exc:  # the task's cancel, or a future's error
                    waiting = self.coro.throw(exc)
                else:
                    waiting = self.coro.send(answer)
            except StopIteration as stop:
                return stop.value


_ASYNC: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()
"""``runs_async`` by handler function: ``inspect`` unwraps and looks at flags each time."""


def runs_async(tool: Tool) -> bool:
    """Whether ``tool``'s handler is ``async def`` (a coroutine or an async generator)."""
    func = tool.execute
    key = getattr(func, "__func__", func)  # a method's function: the same for every instance
    try:
        return _ASYNC[key]
    except (KeyError, TypeError):  # not seen yet, or not weakly referable (then not kept)
        is_async = inspect.iscoroutinefunction(key) or inspect.isasyncgenfunction(key)
    with contextlib.suppress(TypeError):
        _ASYNC[key] = is_async
    return is_async


_is_async = runs_async


async def _drain(gen: Any, ctx: ToolContext) -> Any:
    last: Any = None
    try:
        async for item in gen:
            if isinstance(item, ToolOutput):
                return item
            ctx.progress(jsonable(item) if not isinstance(item, _BLOCKS) else item.model_dump())
            last = item
            if ctx.cancelled:
                raise CallCancelledError(f"call {ctx.call_id} was cancelled")
    finally:
        await gen.aclose()
    return last
