"""The app of the gateway tests: one tool of its own; upstream servers come from settings.

``make`` builds a fresh registry each time (``--app tests.registry.upstream.app:make``), so every
test process adds the ``TOOLQ_MCP_SERVERS`` of its own test.
"""

from __future__ import annotations

from toolq import RiskLevel, ToolRegistry


def make() -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool(risk=RiskLevel.SAFE)
    def echo(text: str) -> str:
        """Say the text back."""
        return text

    return registry
