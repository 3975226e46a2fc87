"""``McpServer``: an upstream MCP server whose tools toolq serves, and how they are governed.

One entry of ``TOOLQ_MCP_SERVERS`` (a JSON list) or the keyword arguments of
``registry.mcp_server(...)``: how to reach the server (``command`` for stdio, or ``url`` for
Streamable HTTP), the credentials it gets, and ``ToolOptions`` by upstream tool name or
pattern (risk, approval, limits, cost, tags) over what the tools' annotations say.

Credentials (``headers``, ``tenant_headers``, ``env``) are ``SecretStr``: never printed, never
part of a tool's schema, so neither the model nor an approver sees them. A value may also be
sealed (``toolq keys seal``): encrypted under ``TOOLQ_SECRETS_KEY`` for this server, tenant
and header, opened only by the worker that connects.
"""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from toolq.models import RiskLevel
from toolq.quotas import ANY_TENANT, RateLimit, valid_tenant

SERVER_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,31}")
"""What an upstream server's name may be: it prefixes tool names and names a category."""
SEALED_PREFIX = "toolq-sealed:"
"""How a sealed credential value starts (``toolq keys seal``)."""
_PATTERN_CHARS = frozenset("*?[")


def is_sealed_credential(value: str) -> bool:
    """Tell whether a credential value is sealed (to be opened with ``TOOLQ_SECRETS_KEY``)."""
    return value.startswith(SEALED_PREFIX)


class ToolOptions(BaseModel):
    """How toolq governs the upstream tools a name or pattern matches; ``None`` keeps the default.

    Defaults: risk from the tool's annotations (``readOnlyHint`` safe, ``destructiveHint``
    dangerous, other hints moderate, no hints dangerous), approval by risk, idempotent when
    read-only or ``idempotentHint``, no limits, no cost.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool | None = None
    """False: the tool is not offered at all."""
    risk: RiskLevel | None = None
    requires_approval: bool | None = None
    idempotent: bool | None = None
    """Re-run after its worker or its stdio server was lost mid-call (default from hints)."""
    timeout: float | None = Field(None, gt=0)
    approval_timeout: float | None = Field(None, gt=0)
    concurrency: int | None = Field(None, ge=1)
    rate_limit: RateLimit | None = None
    cost: float | None = Field(None, ge=0, allow_inf_nan=False)
    tags: list[str] | None = None

    @field_validator("rate_limit", mode="before")
    @classmethod
    def _rate(cls, value: Any) -> Any:
        return RateLimit.parse(value) if isinstance(value, str) else value

    @field_validator("risk", mode="before")
    @classmethod
    def _risk(cls, value: Any) -> Any:
        return RiskLevel.parse(value) if isinstance(value, str) else value

    def over(self, base: ToolOptions) -> ToolOptions:
        """These options over ``base``: every field set here wins."""
        given = {name: getattr(self, name) for name in type(self).model_fields}
        return base.model_copy(update={k: v for k, v in given.items() if v is not None})


class McpSandbox(BaseModel):
    """Run a stdio server in toolq's sandbox (``toolq.builtins.Sandbox``), as the shell tools."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    root: str = "/"
    """The server's working directory (``HOME`` too); the sandbox user must be able to enter it."""
    network: bool = False
    """Keep the worker's network (False: none at all, not even loopback)."""
    isolation: Literal["namespaces", "none"] = "namespaces"
    limits: dict[str, float] = Field(default_factory=dict)
    """``SandboxLimits`` fields (``cpu_seconds``, ``memory_bytes``, ...); ``timeout`` is unused:
    the server lives as long as the worker process, each call has its tool's time limit."""


class McpServer(BaseModel):
    """One upstream MCP server: how to reach it and how its tools are governed."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    """Names the server: its tools are ``<prefix><tool>``, its category is this name."""
    command: list[str] | None = None
    """argv of a stdio server (each worker process starts and supervises its own)."""
    url: str | None = None
    """Streamable HTTP endpoint (``https://host/mcp``)."""
    headers: dict[str, SecretStr] = Field(default_factory=dict)
    """HTTP headers of every connection (also the one that lists the tools)."""
    tenant_headers: dict[str, dict[str, SecretStr]] = Field(default_factory=dict)
    """HTTP headers by tenant (``"*"``: every tenant not named). When set, a call of a tenant
    with no entry fails instead of borrowing another tenant's."""
    env: dict[str, SecretStr] = Field(default_factory=dict)
    """Environment of a stdio server, on top of PATH/HOME/LANG (nothing else is inherited)."""
    cwd: str | None = None
    """Working directory of an unsandboxed stdio server."""
    prefix: str | None = None
    """Prefix of the tools' names in toolq (default ``<name>_``)."""
    tools: dict[str, ToolOptions] = Field(default_factory=dict)
    """Options by upstream tool name or glob pattern (``"delete_*"``); patterns apply in the
    order given, then the exact name."""
    manifest: Path | None = None
    """Pinned tool list (``toolq tools --manifest NAME``): every process builds the same tools
    from it without asking the server, and a call of a tool the server now describes
    differently fails (``upstream_changed``) instead of running."""
    sandbox: McpSandbox | None = None
    """Sandbox a stdio server (see ``McpSandbox``)."""
    connect_timeout: float = Field(30.0, gt=0)
    """Seconds to start (or reach) the server and initialize the session."""

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not SERVER_NAME.fullmatch(value):
            raise ValueError(
                f"MCP server name {value!r} must be 1-32 letters, digits, _ or -, starting "
                "with a letter"
            )
        return value

    @field_validator("tenant_headers")
    @classmethod
    def _tenants(cls, value: dict[str, dict[str, SecretStr]]) -> dict[str, dict[str, SecretStr]]:
        for tenant in value:
            if tenant != ANY_TENANT:
                valid_tenant(tenant)
        return value

    @model_validator(mode="after")
    def _one_transport(self) -> McpServer:
        if (self.command is None) == (self.url is None):
            raise ValueError(f"MCP server {self.name!r} needs either command or url (not both)")
        if self.command is not None and not self.command:
            raise ValueError(f"MCP server {self.name!r}: command is an empty list")
        if self.url is not None:
            if not self.url.startswith(("http://", "https://")):
                raise ValueError(f"MCP server {self.name!r}: url must be http(s)://...")
            if self.sandbox is not None or self.env or self.cwd:
                raise ValueError(
                    f"MCP server {self.name!r}: sandbox, env and cwd are for stdio servers"
                )
        elif self.headers or self.tenant_headers:
            raise ValueError(
                f"MCP server {self.name!r}: headers are for HTTP servers (stdio ones get env)"
            )
        return self

    @property
    def tool_prefix(self) -> str:
        """What every tool name of this server starts with in toolq."""
        return f"{self.name}_" if self.prefix is None else self.prefix

    @property
    def per_tenant(self) -> bool:
        """True when connections carry tenant credentials (one session per tenant)."""
        return bool(self.tenant_headers)

    def options_for(self, upstream_name: str) -> ToolOptions:
        """The options of one upstream tool: matching patterns in order, then its own name."""
        merged = ToolOptions()
        for key, options in self.tools.items():
            if _PATTERN_CHARS & set(key) and fnmatch.fnmatchcase(upstream_name, key):
                merged = options.over(merged)
        exact = self.tools.get(upstream_name)
        return exact.over(merged) if exact is not None else merged

    def credential_scope(self, tenant: str) -> str | None:
        """The ``tenant_headers`` entry a call of ``tenant`` connects with.

        Its own, else ``"*"``; ``""`` when the server has no tenant credentials; None when
        no entry applies.
        """
        if not self.tenant_headers:
            return ""
        if tenant in self.tenant_headers:
            return tenant
        return ANY_TENANT if ANY_TENANT in self.tenant_headers else None


__all__ = [
    "SEALED_PREFIX",
    "McpSandbox",
    "McpServer",
    "ToolOptions",
    "is_sealed_credential",
]
