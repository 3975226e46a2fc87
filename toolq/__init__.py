"""toolq: run LLM tool calls on a distributed Celery/Redis queue.

Parse a model's tool calls (OpenAI Chat, OpenAI Responses, Anthropic, Gemini, MCP), route
each to the queue of its risk level, park the ones that need a human, run them on
workers, stream every step, and render the results as the provider's own messages.
"""

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
