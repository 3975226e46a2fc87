"""From a model's response to stored, routed calls, and back to provider messages."""

from toolq.dispatch.async_client import AsyncApprovals, AsyncBatch, AsyncClient
from toolq.dispatch.client import Batch, Client
from toolq.dispatch.dispatcher import CallRef, Dispatcher
from toolq.dispatch.providers import parse_tool_calls, to_messages

__all__ = [
    "AsyncApprovals",
    "AsyncBatch",
    "AsyncClient",
    "Batch",
    "CallRef",
    "Client",
    "Dispatcher",
    "parse_tool_calls",
    "to_messages",
]
