"""From a model's response to stored, routed calls, and back to provider messages."""

from toolq.dispatch.approval_client import ApprovalClient, AsyncApprovalClient, DecisionToken
from toolq.dispatch.async_client import AsyncApprovals, AsyncBatch, AsyncClient
from toolq.dispatch.client import Batch, Client
from toolq.dispatch.dispatcher import CallRef, Dispatcher
from toolq.dispatch.providers import parse_tool_calls, to_messages
from toolq.dispatch.router import CellRouter
from toolq.dispatch.submission import Submission

__all__ = [
    "ApprovalClient",
    "AsyncApprovalClient",
    "AsyncApprovals",
    "AsyncBatch",
    "AsyncClient",
    "Batch",
    "CallRef",
    "CellRouter",
    "Client",
    "DecisionToken",
    "Dispatcher",
    "Submission",
    "parse_tool_calls",
    "to_messages",
]
