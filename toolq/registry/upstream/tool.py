"""``McpTool``: an upstream server's tool in a registry.

Its schema and annotations are the server's; its calls go to the server through the
toolset's sessions.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, Protocol

import mcp_types as types

from toolq.errors import UpstreamError, UpstreamLostError
from toolq.execution.context import ToolContext
from toolq.models import AudioContent, ContentBlock, ImageContent, TextContent, ToolOutput
from toolq.registry.schema import ArgumentSchema, DictSchema
from toolq.registry.tool import Tool
from toolq.registry.upstream.definitions import UpstreamTool
from toolq.registry.upstream.transports import Launcher
from toolq.upstreams import McpServer, ToolOptions

NAME_LIMIT = 64
"""Longest tool name every provider accepts."""
_NOT_NAME = re.compile(r"[^A-Za-z0-9_-]")


def tool_name(prefix: str, upstream: str) -> str:
    """The toolq name of an upstream tool: prefixed, in the characters every provider takes.

    A name past ``NAME_LIMIT`` is cut and ends with a hash of the upstream name instead.
    """
    name = prefix + _NOT_NAME.sub("_", upstream)
    if len(name) <= NAME_LIMIT:
        return name
    return f"{name[: NAME_LIMIT - 9]}_{hashlib.sha256(upstream.encode()).hexdigest()[:8]}"


class AsGiven(DictSchema):
    """The server's input schema, checked but not filled in.

    The server gets the arguments exactly as dispatched (or as an approver edited them), and
    applies its own defaults.
    """

    def validate(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """Return ``arguments`` unchanged once they match the schema."""
        super().validate(arguments)
        return arguments


class Upstream(Protocol):
    """Where an ``McpTool``'s calls go: its toolset."""

    server: McpServer
    sandbox: Launcher | None

    async def call(self, tool: McpTool, arguments: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        """Run one call of ``tool`` on the server."""
        ...


class McpTool(Tool):
    """A tool of an upstream MCP server, governed by toolq (risk, approval, limits, audit)."""

    def __init__(
        self, toolset: Upstream, upstream: UpstreamTool, name: str, options: ToolOptions
    ) -> None:
        self.toolset = toolset
        self.upstream = upstream
        server = toolset.server.name
        self.name = name
        self.description = upstream.description or upstream.title or f"{upstream.name} ({server})"
        self.risk = options.risk or upstream.risk
        self.tags = ("mcp", server, *(options.tags or ()))
        self.category = server
        self.requires_approval = options.requires_approval
        self.idempotent = upstream.idempotent if options.idempotent is None else options.idempotent
        # A lost connection re-runs an idempotent call once, on a new connection.
        self.retries = 1 if self.idempotent else 0
        self.retry_on = (UpstreamLostError,)
        self.timeout = options.timeout
        self.approval_timeout = options.approval_timeout
        self.concurrency = options.concurrency
        self.rate_limit = options.rate_limit
        self.cost = options.cost or 0
        self.output_schema = upstream.output_schema
        super().__init__()

    def _build_schema(self) -> ArgumentSchema:
        return AsGiven(self.name, self.upstream.input_schema)

    def check_runtime(self) -> None:
        """Check that this host can start the server's sandbox (workers call it at start)."""
        if self.toolset.sandbox is not None:
            self.toolset.sandbox.check()

    def approval_metadata(self) -> dict[str, Any] | None:
        """What approvers see about where the call goes (never a credential)."""
        meta: dict[str, Any] = {"mcp_server": self.toolset.server.name, "tool": self.upstream.name}
        if self.upstream.annotations:
            meta["annotations"] = self.upstream.annotations
        return meta

    def validate_output(self, output: Any) -> Any:
        """Check structured output against the server's output schema; text-only is as is."""
        return output if output is None else super().validate_output(output)

    async def execute(self, _toolq_context: ToolContext, **arguments: Any) -> ToolOutput:
        """Call the tool on its server (from a worker: over this process's session)."""
        return await self.toolset.call(self, arguments, _toolq_context)


def output_of(result: types.CallToolResult, server: str, tool: str) -> ToolOutput:
    """A server's ``CallToolResult`` as toolq's output; ``UpstreamError`` when ``isError``."""
    blocks = [_block(item) for item in result.content]
    if result.is_error:
        text = "\n".join(b.text for b in blocks if isinstance(b, TextContent)).strip()
        raise UpstreamError(
            f"{tool!r} on upstream MCP server {server!r} failed: {text or 'no reason given'}",
            server=server,
        )
    return ToolOutput(data=result.structured_content, content=blocks)


def _block(item: types.ContentBlock) -> ContentBlock:
    if isinstance(item, types.TextContent):
        return TextContent(text=item.text)
    if isinstance(item, types.ImageContent):
        return ImageContent(data=item.data, mime_type=item.mime_type)
    if isinstance(item, types.AudioContent):
        return AudioContent(data=item.data, mime_type=item.mime_type)
    if isinstance(item, types.EmbeddedResource):
        resource = item.resource
        if isinstance(resource, types.TextResourceContents):
            return TextContent(text=resource.text)
        return TextContent(text=f"[resource {resource.uri} ({resource.mime_type}) not shown]")
    if isinstance(item, types.ResourceLink):
        return TextContent(text=f"[resource link {item.name}: {item.uri}]")
    return TextContent(text=f"[{getattr(item, 'type', 'unknown')} content not shown]")
