"""``ToolRegistry``: the tools an application offers, their categories and hooks."""

from __future__ import annotations

import asyncio
import builtins
import os
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Unpack, overload

from pydantic import SecretStr

from toolq.errors import (
    CategoryNotFoundError,
    ConfigurationError,
    DuplicateToolError,
    ToolDeniedError,
    ToolNotFoundError,
)
from toolq.execution.context import ToolContext
from toolq.execution.executor import Executor
from toolq.execution.middleware import AfterHook, BeforeHook, Middleware
from toolq.models import CallResult, ProviderFormat, RiskLevel
from toolq.registry.formats import tool_schemas
from toolq.registry.tool import FunctionTool, FunctionToolOptions, Tool
from toolq.upstreams import McpServer, ToolOptions

if TYPE_CHECKING:
    from toolq.registry.upstream.credentials import CredentialOpener
    from toolq.registry.upstream.toolset import McpToolset
    from toolq.registry.upstream.transports import Launcher


@dataclass
class Category:
    """A named group of tools that can be switched off together (MassGen's categories)."""

    name: str
    description: str = ""
    enabled: bool = True


class ToolRegistry:
    """Registered tools by name, with categories, middleware and schema export."""

    def __init__(self, *, middleware: Iterable[Middleware] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        self._categories: dict[str, Category] = {}
        self.middleware: list[Middleware] = list(middleware)
        self.toolsets: list[McpToolset] = []
        """Upstream MCP servers whose tools this registry offers (``mcp_server``)."""
        self._lock = threading.Lock()

    # -- registration ------------------------------------------------------------------------

    @overload
    def tool(self, name: Callable[..., Any]) -> FunctionTool: ...

    @overload
    def tool(
        self, name: str | None = None, **options: Unpack[FunctionToolOptions]
    ) -> Callable[[Callable[..., Any]], FunctionTool]: ...

    def tool(
        self, name: str | Callable[..., Any] | None = None, **options: Unpack[FunctionToolOptions]
    ) -> FunctionTool | Callable[[Callable[..., Any]], FunctionTool]:
        """Register a function as a tool; its signature and docstring give the schema.

        Use as ``@registry.tool`` or ``@registry.tool("name", risk="dangerous", ...)``. The
        decorated name becomes the ``FunctionTool``, which still calls the function.
        """
        if callable(name):
            bare = FunctionTool(name)
            self.register(bare)
            return bare

        def decorator(func: Callable[..., Any]) -> FunctionTool:
            tool = FunctionTool(func, name=name, **options)
            self.register(tool)
            return tool

        return decorator

    def register(
        self,
        tool: Tool | type[Tool] | Callable[..., Any],
        *,
        name: str | None = None,
        **options: Unpack[FunctionToolOptions],
    ) -> Tool:
        """Add a tool instance, a ``Tool`` subclass (instantiated) or a function.

        A function becomes a ``FunctionTool`` with ``name`` and the options; a ``Tool``
        ignores them.

        Raises ``DuplicateToolError`` when the name is taken.
        """
        if isinstance(tool, type) and issubclass(tool, Tool):
            instance: Tool = tool()
        elif isinstance(tool, Tool):
            instance = tool
        elif callable(tool):
            instance = FunctionTool(tool, name=name, **options)
        else:
            raise ConfigurationError(f"cannot register {tool!r}: not a Tool or a function")
        with self._lock:
            if instance.name in self._tools:
                raise DuplicateToolError(
                    f"a tool named {instance.name!r} is already registered", tool=instance.name
                )
            self._tools[instance.name] = instance
            if instance.category and instance.category not in self._categories:
                self._categories[instance.category] = Category(instance.category)
        return instance

    def include(self, tools: ToolRegistry | Iterable[Tool]) -> None:
        """Register every tool of another registry or iterable (e.g. a built-in toolkit)."""
        for tool in tools.list() if isinstance(tools, ToolRegistry) else tools:
            self.register(tool)

    def replace(self, tool: Tool) -> None:
        """Put ``tool`` in place of the tool of its name (or add it), in one step."""
        with self._lock:
            self._tools[tool.name] = tool
            if tool.category and tool.category not in self._categories:
                self._categories[tool.category] = Category(tool.category)

    def mcp_server(
        self,
        name: str,
        *,
        command: Sequence[str] | None = None,
        url: str | None = None,
        headers: Mapping[str, str | SecretStr] | None = None,
        tenant_headers: Mapping[str, Mapping[str, str | SecretStr]] | None = None,
        env: Mapping[str, str | SecretStr] | None = None,
        cwd: str | None = None,
        prefix: str | None = None,
        tools: Mapping[str, ToolOptions | Mapping[str, Any]] | None = None,
        manifest: str | os.PathLike[str] | None = None,
        sandbox: Launcher | None = None,
        secrets: CredentialOpener | None = None,
        connect_timeout: float = 30.0,
    ) -> McpToolset:
        """Offer the tools of an upstream MCP server, named ``<prefix><tool>`` (``<name>_``).

        ``command`` (stdio) or ``url`` (Streamable HTTP); ``headers``, ``tenant_headers``
        and ``env`` are credentials (kept as ``SecretStr``, plain or sealed); ``tools`` maps
        upstream names or glob patterns to ``ToolOptions``; ``manifest`` pins the tool list;
        ``sandbox`` (``toolq.builtins.Sandbox``) runs a stdio server confined. The tools
        are listed now (or read from the manifest): see ``docs/guide/mcp-gateway.md``.
        """
        server = McpServer.model_validate(
            {
                "name": name,
                "command": list(command) if command is not None else None,
                "url": url,
                "headers": dict(headers or {}),
                "tenant_headers": {t: dict(h) for t, h in (tenant_headers or {}).items()},
                "env": dict(env or {}),
                "cwd": cwd,
                "prefix": prefix,
                "tools": dict(tools or {}),
                "manifest": manifest,
                "connect_timeout": connect_timeout,
            }
        )
        return self.add_mcp_server(server, sandbox=sandbox, secrets=secrets)

    def add_mcp_server(
        self,
        server: McpServer,
        *,
        sandbox: Launcher | None = None,
        secrets: CredentialOpener | None = None,
    ) -> McpToolset:
        """Offer the tools of the upstream server ``server`` describes (``mcp_server``)."""
        from toolq.registry.upstream.toolset import McpToolset

        if any(existing.server.name == server.name for existing in self.toolsets):
            raise ConfigurationError(f"an MCP server named {server.name!r} is already added")
        toolset = McpToolset(self, server, sandbox=sandbox, secrets=secrets)
        toolset.load()
        self.toolsets.append(toolset)
        self.setup_category(server.name, f"Tools of the upstream MCP server {server.name!r}")
        return toolset

    def unregister(self, name: str) -> bool:
        """Remove a tool; True if it was registered."""
        with self._lock:
            return self._tools.pop(name, None) is not None

    remove = unregister

    # -- lookup ------------------------------------------------------------------------------

    def get(self, name: str) -> Tool | None:
        """Return the tool of that name, or ``None``."""
        return self._tools.get(name)

    def find(self, name: str) -> Tool | None:
        """``get``, but a name no tool has yet makes the upstream servers list again first.

        For a worker asked to run a call of ``name``: an upstream server may have added the
        tool after this process listed, and the dispatching process heard first.
        """
        tool = self._tools.get(name)
        if tool is None:
            for toolset in list(self.toolsets):
                toolset.relist_for(name)
            tool = self._tools.get(name)
        return tool

    def require(self, name: str) -> Tool:
        """Return the tool of that name; raise ``ToolNotFoundError`` listing the known ones."""
        tool = self._tools.get(name)
        if tool is None:
            raise self.not_found(name)
        return tool

    def not_found(self, name: str) -> ToolNotFoundError:
        """The error for a name no tool has, listing the known ones."""
        known = ", ".join(sorted(self._tools)) or "none"
        return ToolNotFoundError(f"unknown tool {name!r} (registered: {known})", tool=name)

    def __getitem__(self, name: str) -> Tool:
        return self.require(name)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def has(self, name: str) -> bool:
        """Tell whether a tool of that name is registered."""
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    def __iter__(self) -> Iterator[Tool]:
        return iter(self.list())

    def list(self) -> list[Tool]:
        """All tools, sorted by name."""
        return [self._tools[n] for n in sorted(self._tools)]

    def names(self) -> builtins.list[str]:
        """All tool names, sorted."""
        return sorted(self._tools)

    list_names = names

    def search(
        self,
        *,
        name_contains: str | None = None,
        tags: Iterable[str] | None = None,
        match_all_tags: bool = False,
    ) -> builtins.list[Tool]:
        """Tools whose name contains a substring (any case) and that carry any/all ``tags``."""
        wanted = set(tags or ())
        found = []
        for tool in self.list():
            if name_contains and name_contains.lower() not in tool.name.lower():
                continue
            if wanted:
                have = set(tool.tags)
                if match_all_tags and not wanted <= have:
                    continue
                if not match_all_tags and not wanted & have:
                    continue
            found.append(tool)
        return found

    def by_risk(self, risk: RiskLevel | str) -> builtins.list[Tool]:
        """Tools of one risk level."""
        level = RiskLevel.parse(risk)
        return [t for t in self.list() if t.risk is level]

    get_by_risk = by_risk

    # -- categories --------------------------------------------------------------------------

    def setup_category(self, name: str, description: str = "", *, enabled: bool = True) -> Category:
        """Create (or update) a category."""
        with self._lock:
            category = self._categories.setdefault(name, Category(name))
            category.description = description or category.description
            category.enabled = enabled
            return category

    def categories(self) -> dict[str, Category]:
        """Categories by name."""
        return dict(self._categories)

    def set_categories_enabled(self, names: Iterable[str], enabled: bool) -> None:
        """Enable or disable categories; raises ``CategoryNotFoundError`` for unknown ones."""
        names = list(names)
        unknown = [n for n in names if n not in self._categories]
        if unknown:
            raise CategoryNotFoundError(f"unknown categories: {', '.join(unknown)}")
        for name in names:
            self._categories[name].enabled = enabled

    def enable_category(self, name: str) -> None:
        """Make a category's tools visible and callable again."""
        self.set_categories_enabled([name], True)

    def disable_category(self, name: str) -> None:
        """Hide a category's tools from schemas and refuse their calls."""
        self.set_categories_enabled([name], False)

    def delete_category(self, name: str) -> None:
        """Remove a category and unregister its tools."""
        if name not in self._categories:
            raise CategoryNotFoundError(f"unknown category {name!r}")
        with self._lock:
            del self._categories[name]
            for tool_name in [n for n, t in self._tools.items() if t.category == name]:
                del self._tools[tool_name]

    def is_enabled(self, tool: Tool) -> bool:
        """Tell whether the tool's category (if any) is enabled."""
        category = self._categories.get(tool.category) if tool.category else None
        return category is None or category.enabled

    def check_enabled(self, tool: Tool) -> None:
        """Raise ``ToolDeniedError`` with a reason the model can read if the tool is off."""
        if not self.is_enabled(tool):
            raise ToolDeniedError(
                f"tool {tool.name!r} is disabled (category {tool.category!r} is disabled)",
                tool=tool.name,
                reason="category_disabled",
            )
        if not tool.is_available():
            raise ToolDeniedError(
                f"tool {tool.name!r} is not available right now",
                tool=tool.name,
                reason="unavailable",
            )

    def active(self) -> builtins.list[Tool]:
        """Tools in enabled categories that report themselves available."""
        return [t for t in self.list() if self.is_enabled(t) and t.is_available()]

    # -- what the model sees -----------------------------------------------------------------

    def schemas(
        self, format: ProviderFormat | str = ProviderFormat.OPENAI, *, strict: bool = False
    ) -> builtins.list[dict[str, Any]]:
        """Definitions of the active tools in a provider's format."""
        return tool_schemas(self.active(), format, strict=strict)

    def instructions(self, ctx: ToolContext | None = None) -> str:
        """Join the active tools' instructions for a system prompt."""
        parts: builtins.list[str] = []
        for tool in self.active():
            text = tool.instructions(ctx)
            if text:
                parts.append(f"## {tool.name}\n{text.strip()}")
        return "\n\n".join(parts)

    # -- middleware --------------------------------------------------------------------------

    def use(self, middleware: Middleware) -> Middleware:
        """Add a global middleware (runs around every tool's execution)."""
        self.middleware.append(middleware)
        return middleware

    def before(self, func: Callable[..., Any], *, tool: str | None = None) -> Callable[..., Any]:
        """Add a pre-hook ``(ctx, arguments) -> arguments | None``, global or for one tool."""
        self._attach(BeforeHook(func), tool)
        return func

    def after(self, func: Callable[..., Any], *, tool: str | None = None) -> Callable[..., Any]:
        """Add a post-hook ``(ctx, outcome) -> outcome`` (outcome may be an exception)."""
        self._attach(AfterHook(func), tool)
        return func

    def _attach(self, middleware: Middleware, tool_name: str | None) -> None:
        if tool_name is None:
            self.middleware.append(middleware)
        else:
            target = self.require(tool_name)
            target.middleware = (*target.middleware, middleware)

    # -- local execution ---------------------------------------------------------------------

    async def ainvoke(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        *,
        call_id: str | None = None,
        context: ToolContext | None = None,
        executor: Any = None,
    ) -> CallResult:
        """Run a tool in this process through the shared ``Executor``."""
        ctx = context or ToolContext()
        ctx.call_id = call_id or ctx.call_id or uuid.uuid4().hex
        ctx.tool_call_id = ctx.tool_call_id or ctx.call_id
        ctx.tool_name = name
        runner = executor or Executor(self)
        result: CallResult = await runner.execute(name, dict(arguments or {}), ctx)
        return result

    def invoke(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        *,
        call_id: str | None = None,
        context: ToolContext | None = None,
    ) -> CallResult:
        """Run ``ainvoke`` to completion; inside a running event loop, ``await ainvoke`` instead."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.ainvoke(name, arguments, call_id=call_id, context=context))
        raise RuntimeError("invoke() called inside an event loop; use `await registry.ainvoke()`")

    def __repr__(self) -> str:
        return f"<ToolRegistry {len(self)} tools>"
