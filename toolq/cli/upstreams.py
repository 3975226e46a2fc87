"""``TOOLQ_MCP_SERVERS``: the upstream MCP servers a command's registry offers beside the app's."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import ValidationError

from toolq.errors import ConfigurationError
from toolq.registry.registry import ToolRegistry
from toolq.secretbox import SecretBox
from toolq.settings import Settings
from toolq.upstreams import McpServer

if TYPE_CHECKING:
    from toolq.builtins.sandbox import Sandbox


def add_upstreams(registry: ToolRegistry, settings: Settings) -> ToolRegistry:
    """Add ``settings.mcp_servers`` to ``registry``, sandboxed as each one says.

    Every toolset opens sealed credentials with the box of ``TOOLQ_SECRETS_KEY`` (unless
    its code gave it another).
    """
    box = SecretBox.from_settings(settings)
    added = {toolset.server.name: toolset.server for toolset in registry.toolsets}
    for server in settings.mcp_servers:
        if server.name in added:
            if added[server.name] != server:
                raise ConfigurationError(
                    f"MCP server {server.name!r} is added by the app and by TOOLQ_MCP_SERVERS "
                    "with different settings"
                )
            continue
        registry.add_mcp_server(server, sandbox=sandbox_of(server), secrets=box)
    for toolset in registry.toolsets:
        if toolset.secrets is None:
            toolset.secrets = box
    return registry


def sandbox_of(server: McpServer) -> Sandbox | None:
    """The sandbox ``server.sandbox`` describes, if any."""
    config = server.sandbox
    if config is None:
        return None
    from toolq.builtins.sandbox import Sandbox, SandboxLimits

    try:
        limits = SandboxLimits.model_validate(config.limits)
    except ValidationError as exc:
        raise ConfigurationError(f"MCP server {server.name!r}: sandbox limits: {exc}") from None
    return Sandbox(config.root, limits, network=config.network, isolation=config.isolation)
