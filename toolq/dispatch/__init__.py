"""From a model's response to stored, routed calls, and back to provider messages."""

from toolq.dispatch.client import AsyncBatch, AsyncClient, Batch, Client
from toolq.dispatch.dispatcher import CallRef, Dispatcher
from toolq.dispatch.providers import parse_tool_calls, to_messages

__all__ = [
    "AsyncBatch",
    "AsyncClient",
    "Batch",
    "CallRef",
    "Client",
    "Dispatcher",
    "parse_tool_calls",
    "to_messages",
]
