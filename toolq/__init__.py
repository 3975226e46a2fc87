"""toolq: run LLM tool calls on a distributed Celery/Redis queue.

Parse a model's tool calls (OpenAI Chat, OpenAI Responses, Anthropic, Gemini, MCP), route
each to the queue of its risk level, park the ones that need a human, run them on
workers, stream every step, and render the results as the provider's own messages.

The public names below are imported on first use (PEP 562), so ``import toolq`` — which
every ``toolq`` process does before its subcommand — does not load Celery, SQLAlchemy and
the whole client for a command that needs none of them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from toolq.backend import Backend
    from toolq.chains import ChainResult, ChainStep, ToolChain
    from toolq.dispatch import (
        ApprovalClient,
        AsyncApprovalClient,
        AsyncBatch,
        AsyncClient,
        Batch,
        CallRef,
        Client,
        parse_tool_calls,
        to_messages,
    )
    from toolq.errors import ToolqError
    from toolq.execution import AfterHook, BeforeHook, Executor, Middleware
    from toolq.models import (
        AudioContent,
        CallEnvelope,
        CallResult,
        CallStatus,
        Event,
        EventType,
        ImageContent,
        ProviderFormat,
        RiskLevel,
        TextContent,
        ToolCall,
        ToolOutput,
    )
    from toolq.registry import FunctionTool, FunctionToolOptions, Tool, ToolContext, ToolRegistry
    from toolq.settings import Settings
    from toolq.workers.app import create_celery

__version__ = "0.1.0"

_SOURCES: dict[str, tuple[str, ...]] = {
    "toolq.backend": ("Backend",),
    "toolq.chains": ("ChainResult", "ChainStep", "ToolChain"),
    "toolq.dispatch": (
        "ApprovalClient",
        "AsyncApprovalClient",
        "AsyncBatch",
        "AsyncClient",
        "Batch",
        "CallRef",
        "Client",
        "parse_tool_calls",
        "to_messages",
    ),
    "toolq.errors": ("ToolqError",),
    "toolq.execution": ("AfterHook", "BeforeHook", "Executor", "Middleware"),
    "toolq.models": (
        "AudioContent",
        "CallEnvelope",
        "CallResult",
        "CallStatus",
        "Event",
        "EventType",
        "ImageContent",
        "ProviderFormat",
        "RiskLevel",
        "TextContent",
        "ToolCall",
        "ToolOutput",
    ),
    "toolq.registry": (
        "FunctionTool",
        "FunctionToolOptions",
        "Tool",
        "ToolContext",
        "ToolRegistry",
    ),
    "toolq.settings": ("Settings",),
    "toolq.workers.app": ("create_celery",),
}
_MODULE_OF = {name: module for module, names in _SOURCES.items() for name in names}


def _load(name: str) -> Any:
    """Import a public name's module the first time the name is asked for (PEP 562)."""
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_MODULE_OF})


if not TYPE_CHECKING:
    # Hidden from type checkers: they read the imports above, and a module `__getattr__`
    # would make them accept any misspelt `toolq.<name>` as `Any`.
    __getattr__ = _load


__all__ = [
    "AfterHook",
    "ApprovalClient",
    "AsyncApprovalClient",
    "AsyncBatch",
    "AsyncClient",
    "AudioContent",
    "Backend",
    "Batch",
    "BeforeHook",
    "CallEnvelope",
    "CallRef",
    "CallResult",
    "CallStatus",
    "ChainResult",
    "ChainStep",
    "Client",
    "Event",
    "EventType",
    "Executor",
    "FunctionTool",
    "FunctionToolOptions",
    "ImageContent",
    "Middleware",
    "ProviderFormat",
    "RiskLevel",
    "Settings",
    "TextContent",
    "Tool",
    "ToolCall",
    "ToolChain",
    "ToolContext",
    "ToolOutput",
    "ToolRegistry",
    "ToolqError",
    "__version__",
    "create_celery",
    "parse_tool_calls",
    "to_messages",
]
