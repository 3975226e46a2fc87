"""The Executor, run in process through registry.invoke/ainvoke (no Redis, no Celery)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from pydantic import BaseModel

from toolq import (
    CallStatus,
    Executor,
    ImageContent,
    Middleware,
    TextContent,
    Tool,
    ToolContext,
    ToolOutput,
    ToolRegistry,
)


@pytest.fixture
def registry() -> ToolRegistry:
    return ToolRegistry()


@pytest.fixture
def release() -> Iterator[threading.Event]:
    """Set at teardown so handler threads left behind by a timeout finish."""
    event = threading.Event()
    yield event
    event.set()


class Recorder(Middleware):
    """Appends ``<label>.before`` / ``<label>.after`` to a shared log."""

    def __init__(self, label: str, log: list[str]) -> None:
        self.label = label
        self.log = log

    def before_execute(self, ctx: ToolContext, tool: Tool, arguments: dict[str, Any]) -> None:
        self.log.append(f"{self.label}.before")

    def after_execute(self, ctx: ToolContext, tool: Tool, outcome: Any) -> Any:
        self.log.append(f"{self.label}.after")
        return outcome


class Total(BaseModel):
    total: int


# -- the result ---------------------------------------------------------------------------------


def test_result_fields(registry: ToolRegistry) -> None:
    @registry.tool
    def add(a: int, b: int) -> int:
        return a + b

    ctx = ToolContext(run_id="run-1", tool_call_id="call_abc")
    result = registry.invoke("add", {"a": 2, "b": 3}, call_id="c-1", context=ctx)
    assert result.call_id == "c-1"
    assert result.tool_call_id == "call_abc"
    assert result.run_id == "run-1"
    assert result.name == "add"
    assert result.status is CallStatus.SUCCEEDED and result.ok and result.is_final
    assert result.output == 5
    assert (result.error, result.error_type) == (None, None)
    assert result.duration_ms is not None and result.duration_ms > 0
    assert result.attempts == 1
    assert (result.content, result.undo) == ([], None)


def test_validation_errors_name_the_field_and_nothing_runs(registry: ToolRegistry) -> None:
    ran: list[int] = []

    @registry.tool
    def add(a: int, b: int) -> int:
        ran.append(a)
        return a + b

    result = registry.invoke("add", {"a": "two"})
    assert result.status is CallStatus.FAILED
    assert result.error_type == "invalid_arguments"
    assert result.error == (
        "invalid arguments for 'add': a: Input should be a valid integer, unable to parse "
        "string as an integer; b: Field required"
    )
    assert result.attempts == 0
    assert result.duration_ms is not None and result.duration_ms > 0
    assert ran == []


def test_unknown_tool(registry: ToolRegistry) -> None:
    result = registry.invoke("ghost", {"x": 1}, call_id="c-9")
    assert (result.call_id, result.name, result.status) == ("c-9", "ghost", CallStatus.FAILED)
    assert result.error_type == "tool_not_found"
    assert result.error == "unknown tool 'ghost' (registered: none)"


def test_handler_exception(registry: ToolRegistry) -> None:
    @registry.tool
    def boom() -> None:
        raise ValueError("no good")

    result = registry.invoke("boom")
    assert result.status is CallStatus.FAILED
    assert (result.error, result.error_type) == ("ValueError: no good", "ValueError")
    assert result.attempts == 1


# -- handlers: sync, async, async generator ----------------------------------------------------


def test_sync_and_async_handlers(registry: ToolRegistry) -> None:
    @registry.tool
    def sync_tool(n: int) -> list[int]:
        return list(range(n))

    @registry.tool
    async def async_tool(n: int) -> dict[str, int]:
        await asyncio.sleep(0)
        return {"n": n}

    class AsyncClassTool(Tool):
        name = "async_class"
        description = "d"

        async def execute(self, word: str) -> str:
            await asyncio.sleep(0)
            return word[::-1]

    registry.register(AsyncClassTool)
    assert registry.invoke("sync_tool", {"n": 3}).output == [0, 1, 2]
    assert registry.invoke("async_tool", {"n": 4}).output == {"n": 4}
    assert registry.invoke("async_class", {"word": "abc"}).output == "cba"


def test_async_generator_yields_are_progress_and_the_last_is_the_result(
    registry: ToolRegistry,
) -> None:
    @registry.tool
    async def count(to: int) -> AsyncIterator[dict[str, int]]:
        for i in range(1, to + 1):
            yield {"i": i}

    progress: list[Any] = []
    result = registry.invoke("count", {"to": 3}, context=ToolContext(progress_sink=progress.append))
    assert result.status is CallStatus.SUCCEEDED
    assert result.output == {"i": 3}
    assert progress == [{"i": 1}, {"i": 2}, {"i": 3}]


def test_a_yielded_tool_output_ends_the_stream(registry: ToolRegistry) -> None:
    after: list[str] = []

    @registry.tool
    async def job() -> AsyncIterator[Any]:
        yield {"pct": 50}
        yield ToolOutput.ok({"done": True}, content=[TextContent(text="finished")])
        after.append("resumed")  # never: the stream is closed at the ToolOutput
        yield "late"

    progress: list[Any] = []
    result = registry.invoke("job", context=ToolContext(progress_sink=progress.append))
    assert result.output == {"done": True}
    assert result.content == [TextContent(text="finished")]
    assert progress == [{"pct": 50}]
    assert after == []


def test_handlers_report_progress_through_the_context(registry: ToolRegistry) -> None:
    @registry.tool
    def steps(ctx: ToolContext) -> str:
        for step in ("read", "parse"):
            ctx.progress({"step": step})
        return "ok"

    progress: list[Any] = []
    assert registry.invoke("steps", context=ToolContext(progress_sink=progress.append)).ok
    assert progress == [{"step": "read"}, {"step": "parse"}]


# -- outputs ------------------------------------------------------------------------------------


def test_tool_output_ok_maps_onto_the_result(registry: ToolRegistry) -> None:
    @registry.tool
    def edit() -> ToolOutput:
        return ToolOutput.ok(
            {"updated": True},
            undo_metadata={"doc": "d1", "original": "old"},
            content=[TextContent(text="edited d1")],
            artifacts=[{"kind": "doc", "id": "d1"}],
        )

    result = registry.invoke("edit")
    assert result.status is CallStatus.SUCCEEDED
    assert result.output == {"updated": True}
    assert result.undo == {"doc": "d1", "original": "old"}
    assert result.content == [TextContent(text="edited d1")]
    assert result.artifacts == [{"kind": "doc", "id": "d1"}]


def test_tool_output_fail_is_a_failed_result(registry: ToolRegistry) -> None:
    @registry.tool
    def nope() -> ToolOutput:
        return ToolOutput.fail("Something went wrong", data={"partial": 1})

    result = registry.invoke("nope")
    assert result.status is CallStatus.FAILED
    assert (result.error, result.error_type) == ("Something went wrong", "tool_failure")
    assert result.output == {"partial": 1}


def test_content_blocks_become_result_content(registry: ToolRegistry) -> None:
    @registry.tool
    def one() -> TextContent:
        return TextContent(text="hello")

    @registry.tool
    def many() -> list[Any]:
        return [TextContent(text="a chart"), ImageContent(data="iVBORw0KGgo=")]

    @registry.tool
    def text() -> ToolOutput:
        return ToolOutput.text("plain")

    single = registry.invoke("one")
    assert (single.content, single.output) == ([TextContent(text="hello")], None)
    assert registry.invoke("many").content == [
        TextContent(text="a chart"),
        ImageContent(data="iVBORw0KGgo=", mime_type="image/png"),
    ]
    assert registry.invoke("text").content == [TextContent(text="plain")]


def test_models_are_dumped_to_json(registry: ToolRegistry) -> None:
    @registry.tool
    def total() -> Total:
        return Total(total=3)

    assert registry.invoke("total").output == {"total": 3}


def test_output_schema_mismatch_is_invalid_output(registry: ToolRegistry) -> None:
    @registry.tool(output_schema={"type": "object", "required": ["total"]})
    def good() -> dict[str, int]:
        return {"total": 1}

    @registry.tool(output_schema=Total)
    def bad(value: Any) -> Any:
        return {"total": value}

    @registry.tool(output_schema=Total)
    def bad_data() -> ToolOutput:
        return ToolOutput.ok({"sum": 1})

    assert registry.invoke("good").output == {"total": 1}
    assert registry.invoke("bad", {"value": 2}).output == {"total": 2}
    for result in (registry.invoke("bad", {"value": "two"}), registry.invoke("bad_data")):
        assert result.status is CallStatus.FAILED
        assert result.error_type == "invalid_output"
        assert result.output is None
    assert registry.invoke("bad", {"value": "two"}).error == (
        "output of 'bad' does not match its schema: total: 'two' is not of type 'integer'"
    )


# -- middleware ---------------------------------------------------------------------------------


def test_middleware_order(registry: ToolRegistry) -> None:
    log: list[str] = []
    registry.use(Recorder("g1", log))
    registry.use(Recorder("g2", log))

    @registry.tool(middleware=[Recorder("t1", log), Recorder("t2", log)])
    def work() -> str:
        log.append("execute")
        return "done"

    assert registry.invoke("work").output == "done"
    assert log == [
        "g1.before",
        "g2.before",
        "t1.before",
        "t2.before",
        "execute",
        "t2.after",
        "t1.after",
        "g2.after",
        "g1.after",
    ]


def test_pre_hooks_rewrite_arguments(registry: ToolRegistry) -> None:
    seen: list[dict[str, Any]] = []

    @registry.tool
    def greet(name: str, punctuation: str = "!") -> str:
        return f"Hello, {name}{punctuation}"

    def trim(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
        return {**args, "name": args["name"].strip()}

    async def shout(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
        return {**args, "name": args["name"].upper()}

    def observe(ctx: ToolContext, args: dict[str, Any]) -> None:
        seen.append(dict(args))  # None keeps the arguments

    registry.before(trim)
    registry.before(observe, tool="greet")
    registry.before(shout, tool="greet")
    assert registry.invoke("greet", {"name": "  ann "}).output == "Hello, ANN!"
    assert seen == [{"name": "ann", "punctuation": "!"}]


def test_after_hooks_see_exceptions_and_may_recover(registry: ToolRegistry) -> None:
    seen: list[Any] = []

    @registry.tool
    def read(path: str) -> str:
        raise FileNotFoundError(path)

    async def recover(ctx: ToolContext, outcome: Any) -> Any:
        seen.append(outcome)
        if isinstance(outcome, FileNotFoundError):
            return f"File not found: {outcome}. Please check the path."
        return outcome

    registry.after(recover, tool="read")
    result = registry.invoke("read", {"path": "/nope"})
    assert result.status is CallStatus.SUCCEEDED
    assert result.output == "File not found: /nope. Please check the path."
    assert len(seen) == 1 and isinstance(seen[0], FileNotFoundError)


def test_after_hooks_may_turn_a_value_into_an_error(registry: ToolRegistry) -> None:
    @registry.tool
    def score() -> int:
        return -1

    def refuse_negative(ctx: ToolContext, outcome: Any) -> Any:
        if isinstance(outcome, int) and outcome < 0:
            return ValueError(f"negative score {outcome}")
        return outcome

    registry.after(refuse_negative)
    result = registry.invoke("score")
    assert result.status is CallStatus.FAILED
    assert (result.error, result.error_type) == ("ValueError: negative score -1", "ValueError")


def test_an_unrecovered_exception_passes_through_every_after_hook(registry: ToolRegistry) -> None:
    seen: list[str] = []

    @registry.tool
    def fail() -> None:
        raise PermissionError("denied by os")

    def tool_post(ctx: ToolContext, outcome: Any) -> Any:
        seen.append(f"tool:{type(outcome).__name__}")
        return outcome

    def global_post(ctx: ToolContext, outcome: Any) -> Any:
        seen.append(f"global:{type(outcome).__name__}")
        return outcome

    registry.after(tool_post, tool="fail")
    registry.after(global_post)
    result = registry.invoke("fail")
    assert seen == ["tool:PermissionError", "global:PermissionError"]
    assert (result.status, result.error) == (CallStatus.FAILED, "PermissionError: denied by os")


def test_hooks_that_raise(registry: ToolRegistry) -> None:
    ran: list[str] = []

    @registry.tool
    def guarded() -> str:
        ran.append("guarded")
        return "ran"

    @registry.tool
    def checked() -> str:
        return "ran"

    def gate(ctx: ToolContext, args: dict[str, Any]) -> None:
        raise PermissionError("not today")

    def broken(ctx: ToolContext, outcome: Any) -> Any:
        raise KeyError("lost")

    registry.before(gate, tool="guarded")
    registry.after(broken, tool="checked")
    refused = registry.invoke("guarded")
    assert (refused.status, refused.error) == (CallStatus.FAILED, "PermissionError: not today")
    assert ran == []
    crashed = registry.invoke("checked")
    assert (crashed.status, crashed.error_type) == (CallStatus.FAILED, "KeyError")


def test_hooks_for_an_unknown_tool_are_refused(registry: ToolRegistry) -> None:
    from toolq.errors import ToolNotFoundError

    with pytest.raises(ToolNotFoundError):
        registry.before(lambda ctx, args: None, tool="ghost")


# -- time limits ---------------------------------------------------------------------------------


def test_timeout_of_a_sync_handler(registry: ToolRegistry, release: threading.Event) -> None:
    @registry.tool(timeout=0.1)
    def stuck() -> str:
        release.wait(10)  # ignores its context, like a blocking library call
        return "late"

    started = time.monotonic()
    result = registry.invoke("stuck")
    elapsed = time.monotonic() - started
    assert result.status is CallStatus.FAILED
    assert result.error_type == "timeout"
    assert result.error == "'stuck' timed out after 0.1s"
    assert elapsed < 2, "invoke must not wait for the abandoned handler thread"


def test_timeout_of_an_async_handler(registry: ToolRegistry) -> None:
    @registry.tool(timeout=0.1)
    async def slow() -> str:
        await asyncio.sleep(10)
        return "late"

    started = time.monotonic()
    result = registry.invoke("slow")
    assert (result.status, result.error_type) == (CallStatus.FAILED, "timeout")
    assert time.monotonic() - started < 2


def test_a_timeout_cancels_the_context(registry: ToolRegistry) -> None:
    woke: list[bool] = []

    @registry.tool(timeout=0.1)
    def polite(ctx: ToolContext) -> str:
        woke.append(ctx.wait_cancelled(10))
        return "late"

    ctx = ToolContext()
    assert registry.invoke("polite", context=ctx).error_type == "timeout"
    assert ctx.cancelled
    deadline = time.monotonic() + 2
    while not woke and time.monotonic() < deadline:
        time.sleep(0.01)
    assert woke == [True]


def test_executor_default_timeout(registry: ToolRegistry) -> None:
    @registry.tool
    async def slow() -> None:
        await asyncio.sleep(10)

    @registry.tool(timeout=5)
    async def own_limit() -> str:
        await asyncio.sleep(0.2)
        return "in time"

    executor = Executor(registry, default_timeout=0.1)

    async def main() -> tuple[Any, Any]:
        return (
            await registry.ainvoke("slow", executor=executor),
            await registry.ainvoke("own_limit", executor=executor),
        )

    slow_result, own = asyncio.run(main())
    assert slow_result.error == "'slow' timed out after 0.1s"
    assert own.output == "in time"


# -- retries -------------------------------------------------------------------------------------


def run(executor: Executor, name: str, args: dict[str, Any], **kwargs: Any) -> Any:
    return asyncio.run(executor.execute(name, args, ToolContext(call_id="c-1"), **kwargs))


def test_retries_with_backoff_for_declared_exceptions(registry: ToolRegistry) -> None:
    attempts_seen: list[int] = []

    @registry.tool(retries=3, retry_on=(ConnectionError,))
    def flaky(ctx: ToolContext) -> str:
        attempts_seen.append(ctx.attempt)
        if ctx.attempt < 3:
            raise ConnectionError(f"down on attempt {ctx.attempt}")
        return "up"

    retries: list[tuple[int, float, str]] = []
    result = run(
        Executor(registry, retry_backoff=0.01),
        "flaky",
        {},
        on_retry=lambda attempt, delay, exc: retries.append((attempt, delay, str(exc))),
    )
    assert result.status is CallStatus.SUCCEEDED
    assert (result.output, result.attempts) == ("up", 3)
    assert attempts_seen == [1, 2, 3]
    assert [(a, e) for a, _, e in retries] == [(2, "down on attempt 1"), (3, "down on attempt 2")]
    first, second = retries[0][1], retries[1][1]
    assert 0.008 <= first <= 0.012 and 0.016 <= second <= 0.024  # doubling, with jitter


def test_retries_run_out(registry: ToolRegistry) -> None:
    calls: list[int] = []

    @registry.tool(retries=2, retry_on=(TimeoutError, ConnectionError))
    def down() -> None:
        calls.append(1)
        raise ConnectionRefusedError("refused")  # a ConnectionError

    retried: list[int] = []
    result = run(
        Executor(registry, retry_backoff=0.001),
        "down",
        {},
        on_retry=lambda attempt, delay, exc: retried.append(attempt),
    )
    assert result.status is CallStatus.FAILED
    assert result.error == "ConnectionRefusedError: refused"
    assert result.error_type == "ConnectionRefusedError"
    assert result.attempts == 3
    assert (len(calls), retried) == (3, [2, 3])


def test_undeclared_exceptions_are_not_retried(registry: ToolRegistry) -> None:
    calls: list[int] = []

    @registry.tool(retries=5, retry_on=(ConnectionError,))
    def wrong() -> None:
        calls.append(1)
        raise ValueError("bad input")

    @registry.tool(retries=5)  # no retry_on: nothing is retried
    def undeclared() -> None:
        calls.append(2)
        raise ConnectionError("down")

    retried: list[int] = []
    executor = Executor(registry, retry_backoff=0.001)
    on_retry = lambda attempt, delay, exc: retried.append(attempt)  # noqa: E731
    assert run(executor, "wrong", {}, on_retry=on_retry).attempts == 1
    assert run(executor, "undeclared", {}, on_retry=on_retry).attempts == 1
    assert calls == [1, 2]
    assert retried == []


def test_a_handler_timeout_error_is_retried_but_the_time_limit_is_final(
    registry: ToolRegistry,
) -> None:
    calls: list[str] = []

    @registry.tool(retries=2, retry_on=(TimeoutError,))
    def socket_timeout(ctx: ToolContext) -> str:
        calls.append("socket")
        if ctx.attempt == 1:
            raise TimeoutError("read timed out")  # the handler's own error: retried
        return "read"

    @registry.tool(timeout=0.05, retries=2, retry_on=(TimeoutError,))
    async def over_limit() -> None:
        calls.append("limit")
        await asyncio.sleep(10)  # the tool's time limit: the call is over

    executor = Executor(registry, retry_backoff=0.001)
    assert run(executor, "socket_timeout", {}).attempts == 2
    limited = run(executor, "over_limit", {})
    assert (limited.error_type, limited.attempts) == ("timeout", 1)
    assert calls == ["socket", "socket", "limit"]


def test_retries_of_an_async_handler(registry: ToolRegistry) -> None:
    @registry.tool(retries=1, retry_on=(OSError,))
    async def once_more(ctx: ToolContext) -> int:
        if ctx.attempt == 1:
            raise OSError("transient")
        return ctx.attempt

    result = run(Executor(registry, retry_backoff=0.001), "once_more", {})
    assert (result.output, result.attempts) == (2, 2)


# -- cancellation --------------------------------------------------------------------------------


def test_cancel_from_another_thread_while_an_async_handler_sleeps(registry: ToolRegistry) -> None:
    started = threading.Event()
    finished: list[str] = []

    @registry.tool
    async def long_job() -> str:
        started.set()
        await asyncio.sleep(10)
        finished.append("slept")
        return "done"

    ctx = ToolContext()

    def cancel_when_started() -> None:
        started.wait(5)
        ctx.cancel()

    canceller = threading.Thread(target=cancel_when_started)
    canceller.start()
    began = time.monotonic()
    result = registry.invoke("long_job", call_id="c-7", context=ctx)
    canceller.join()
    assert result.status is CallStatus.CANCELLED
    assert (result.error, result.error_type) == ("call c-7 was cancelled", "cancelled")
    assert time.monotonic() - began < 2
    assert finished == []
    ctx.cancel()  # again, after the loop is gone: harmless


def test_cancel_while_a_threaded_sync_handler_waits(registry: ToolRegistry) -> None:
    @registry.tool(timeout=10)
    def waiter(ctx: ToolContext) -> str:
        ctx.wait_cancelled(10)
        return "woke"

    ctx = ToolContext()
    threading.Timer(0.1, ctx.cancel).start()
    result = registry.invoke("waiter", context=ctx)
    assert (result.status, result.error_type) == (CallStatus.CANCELLED, "cancelled")


def test_cancel_during_a_stream(registry: ToolRegistry) -> None:
    @registry.tool
    async def ticker() -> AsyncIterator[int]:
        for i in range(1000):
            yield i
            await asyncio.sleep(0.01)

    progress: list[Any] = []
    ctx = ToolContext(progress_sink=progress.append)
    threading.Timer(0.1, ctx.cancel).start()
    result = registry.invoke("ticker", context=ctx)
    assert result.status is CallStatus.CANCELLED
    assert 1 <= len(progress) < 1000
    assert progress == list(range(len(progress)))


def test_a_call_cancelled_before_it_starts_does_not_run(registry: ToolRegistry) -> None:
    ran: list[int] = []

    @registry.tool
    def work() -> None:
        ran.append(1)

    ctx = ToolContext()
    ctx.cancel()
    result = registry.invoke("work", context=ctx)
    assert result.status is CallStatus.CANCELLED
    assert ran == []


def test_cancel_after_completion_is_harmless(registry: ToolRegistry) -> None:
    @registry.tool
    async def quick() -> int:
        return 1

    ctx = ToolContext()
    assert registry.invoke("quick", context=ctx).output == 1
    ctx.cancel()  # the loop that ran the call is closed by now
    assert ctx.cancelled


def test_after_hooks_see_the_cancellation(registry: ToolRegistry) -> None:
    seen: list[str] = []

    @registry.tool
    async def sleeper() -> None:
        await asyncio.sleep(10)

    def observe(ctx: ToolContext, outcome: Any) -> Any:
        seen.append(type(outcome).__name__)
        return outcome

    registry.after(observe)
    ctx = ToolContext()
    threading.Timer(0.05, ctx.cancel).start()
    assert registry.invoke("sleeper", context=ctx).status is CallStatus.CANCELLED
    assert seen == ["CallCancelledError"]


def test_a_cancel_callback_registered_while_the_cancel_runs_is_called_once() -> None:
    """``on_cancel`` racing ``cancel`` (registered while it kills the call's processes):
    the callback runs once, by one or the other, never by both."""
    calls: list[str] = []

    class Racing(ToolContext):
        def kill_processes(self) -> None:
            self.on_cancel(lambda: calls.append("late"))  # another thread's, in the window
            super().kill_processes()

    ctx = Racing(call_id="c")
    ctx.on_cancel(lambda: calls.append("early"))
    ctx.cancel()
    ctx.cancel()
    assert sorted(calls) == ["early", "late"]
    assert ctx.wait_cancelled(0) and ctx.cancelled
