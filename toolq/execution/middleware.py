"""Middleware: hooks around every execution, global (registry) or per tool.

Order (pai-agent-sdk's): global ``before_execute`` → tool ``before_execute`` → handler →
tool ``after_execute`` → global ``after_execute``. Before-hooks may rewrite the arguments;
after-hooks see the result *or the exception* and may replace either, so a post-hook can
turn an error into a fallback value or a value into an error.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from toolq.execution.context import ToolContext
    from toolq.registry.tool import Tool

Outcome = Any  # a handler's value, or the BaseException it raised


class Middleware:
    """Base class with no-op hooks; each may be sync or ``async``."""

    def before_execute(
        self, ctx: ToolContext, tool: Tool, arguments: dict[str, Any]
    ) -> dict[str, Any] | Awaitable[dict[str, Any] | None] | None:
        """Return new arguments to replace them, or ``None`` to keep them."""
        return None

    def after_execute(
        self, ctx: ToolContext, tool: Tool, outcome: Outcome
    ) -> Outcome | Awaitable[Outcome]:
        """Return the outcome to pass on (the same, a replacement value, or an exception)."""
        return outcome


class BeforeHook(Middleware):
    """A function ``(ctx, arguments) -> arguments | None`` used as a before-hook."""

    def __init__(self, func: Callable[..., Any]) -> None:
        self.func = func

    def before_execute(self, ctx: ToolContext, tool: Tool, arguments: dict[str, Any]) -> Any:
        """Call the function with the context and the arguments."""
        return self.func(ctx, arguments)


class AfterHook(Middleware):
    """A function ``(ctx, outcome) -> outcome`` used as an after-hook."""

    def __init__(self, func: Callable[..., Any]) -> None:
        self.func = func

    def after_execute(self, ctx: ToolContext, tool: Tool, outcome: Outcome) -> Any:
        """Call the function with the context and the outcome."""
        return self.func(ctx, outcome)


async def resolve(value: Any) -> Any:
    """Await ``value`` if a hook returned an awaitable."""
    if inspect.isawaitable(value):
        return await value
    return value
