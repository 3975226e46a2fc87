"""``UpstreamTool``: a tool as an upstream MCP server describes it, and what toolq makes of it.

The risk comes from the annotations (``risk_of``); a definition's ``digest`` covers what
toolq validates and gates a call with, so two processes (or a process and a pinned
manifest) can tell whether they describe a tool the same way.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import mcp_types as types
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from toolq.errors import ConfigurationError
from toolq.models import RiskLevel

HINTS = ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")
"""The behaviour hints of MCP's ``ToolAnnotations`` (``title`` describes, it does not hint)."""


class UpstreamTool(BaseModel):
    """One tool of a ``tools/list`` answer, in its wire form (camelCase annotations)."""

    model_config = ConfigDict(frozen=True)

    name: str
    title: str | None = None
    description: str = ""
    input_schema: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})
    output_schema: dict[str, Any] | None = None
    annotations: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def of(cls, tool: types.Tool) -> UpstreamTool:
        """The definition of a tool from the SDK's listing."""
        annotations = (
            tool.annotations.model_dump(by_alias=True, exclude_none=True, mode="json")
            if tool.annotations is not None
            else {}
        )
        return cls(
            name=tool.name,
            title=tool.title or annotations.get("title"),
            description=tool.description or "",
            input_schema=dict(tool.input_schema),
            output_schema=dict(tool.output_schema) if tool.output_schema is not None else None,
            annotations=annotations,
        )

    @property
    def digest(self) -> str:
        """SHA-256 of the canonical JSON of everything but the title."""
        canonical = json.dumps(
            self.model_dump(mode="json", exclude={"title"}),
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=False,
        )
        return hashlib.sha256(canonical.encode()).hexdigest()

    @property
    def risk(self) -> RiskLevel:
        """The risk its annotations give (see ``risk_of``)."""
        return risk_of(self.annotations)

    @property
    def idempotent(self) -> bool:
        """True when it says it is read-only or idempotent: safe to run twice."""
        hints = self.annotations
        return hints.get("readOnlyHint") is True or hints.get("idempotentHint") is True


def risk_of(annotations: dict[str, Any]) -> RiskLevel:
    """``readOnlyHint`` safe, ``destructiveHint`` dangerous, other hints moderate, none dangerous.

    A tool that says nothing about itself gets the strictest level: MCP's own default for
    ``destructiveHint`` is true.
    """
    if not any(hint in annotations for hint in HINTS):
        return RiskLevel.DANGEROUS
    if annotations.get("readOnlyHint") is True:
        return RiskLevel.SAFE
    if annotations.get("destructiveHint") is True:
        return RiskLevel.DANGEROUS
    return RiskLevel.MODERATE


class Manifest(BaseModel):
    """A pinned tool list of one server: what every process builds its tools from."""

    server: str
    tools: list[UpstreamTool]

    @classmethod
    def load(cls, path: Path, server: str) -> Manifest:
        """Read a manifest file; ``ConfigurationError`` if it is unreadable or another server's."""
        try:
            manifest = cls.model_validate_json(path.read_bytes())
        except (OSError, ValidationError) as exc:
            raise ConfigurationError(f"MCP server {server!r}: manifest {path}: {exc}") from None
        if manifest.server != server:
            raise ConfigurationError(
                f"MCP server {server!r}: manifest {path} lists the tools of {manifest.server!r}"
            )
        return manifest

    def dump(self) -> str:
        """The manifest as a JSON document."""
        return self.model_dump_json(indent=2)
