"""Upstream MCP servers' tools in a registry (``ToolRegistry.mcp_server``).

``McpToolset`` (the tools of one server, and how calls reach it), ``McpTool`` (one tool),
``UpstreamTool`` and ``Manifest`` (definitions as the server lists them), ``Launch`` and
``Launcher`` (how a stdio server is started: directly, or by ``toolq.builtins.Sandbox``).
The configuration models are in ``toolq.upstreams``; the sandbox and the opener of sealed
credentials sit in higher layers and are handed in.
"""

from toolq.registry.upstream.credentials import CredentialOpener
from toolq.registry.upstream.definitions import Manifest, UpstreamTool, risk_of
from toolq.registry.upstream.tool import McpTool
from toolq.registry.upstream.toolset import McpToolset
from toolq.registry.upstream.transports import Launch, Launcher

__all__ = [
    "CredentialOpener",
    "Launch",
    "Launcher",
    "Manifest",
    "McpTool",
    "McpToolset",
    "UpstreamTool",
    "risk_of",
]
