"""``McpToolset``: an upstream MCP server's tools in a registry, and the way calls reach it.

Where the tool list comes from: a pinned manifest when the server config names one (every
process builds the same tools from the same file, whatever the server says), else the
server itself, listed once when the registry is built (``load``), over a connection of its
own that is closed again: a prefork worker's parent holds no session its children would
share. A process that holds the shared session (a worker running calls of a server without
tenant credentials, a ``watch``ing gateway) follows ``notifications/tools/list_changed``:
tools appear, change and disappear in its registry as the server lists them. Pinned tools
never change; a call of one the server now describes otherwise fails (``upstream_changed``).

Calls run on the process's ``SessionLoop`` whichever thread or loop asks: one session per
credential scope, started on first use and again after it ended (a crashed stdio server is
restarted by the next call). A call the connection dropped is re-run once on a new one
when its tool is idempotent, and fails ``worker_lost`` otherwise, as a call of a lost
worker does: its outcome is unknown and nothing runs it twice.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any, Protocol

import anyio

from toolq.errors import (
    ConfigurationError,
    DuplicateToolError,
    ToolqError,
    UpstreamChangedError,
    UpstreamLostError,
    UpstreamUnavailableError,
    WorkerLostError,
)
from toolq.execution.context import ToolContext
from toolq.models import ToolOutput
from toolq.quotas import DEFAULT_TENANT
from toolq.registry.tool import Tool
from toolq.registry.upstream import credentials
from toolq.registry.upstream.connections import RESTART_DELAY, Connections, SessionLoop
from toolq.registry.upstream.credentials import CredentialOpener
from toolq.registry.upstream.definitions import Manifest, UpstreamTool
from toolq.registry.upstream.session import SessionLost, UpstreamSession, connected, list_tools
from toolq.registry.upstream.tool import McpTool, output_of, tool_name
from toolq.registry.upstream.transports import (
    Launch,
    Launcher,
    Opener,
    StdioExit,
    direct,
    http,
    stdio,
)
from toolq.upstreams import McpServer

log = logging.getLogger("toolq.upstream")

RELIST_INTERVAL = 1.0
"""Least seconds between two listings asked for by calls of tools a process does not know."""


class ToolTarget(Protocol):
    """The registry operations a toolset uses (``ToolRegistry`` has them)."""

    def register(self, tool: Tool) -> Tool:
        """Add a tool; ``DuplicateToolError`` when its name is taken."""
        ...

    def replace(self, tool: Tool) -> None:
        """Put a tool in place of the one of its name."""
        ...

    def unregister(self, name: str) -> bool:
        """Remove a tool."""
        ...


class McpToolset:
    """The tools of one upstream server in ``registry``, under the server's prefix."""

    def __init__(
        self,
        registry: ToolTarget,
        server: McpServer,
        *,
        sandbox: Launcher | None = None,
        secrets: CredentialOpener | None = None,
    ) -> None:
        if sandbox is not None and server.command is None:
            raise ConfigurationError(
                f"MCP server {server.name!r}: only stdio servers are sandboxed"
            )
        self.registry = registry
        self.server = server
        self.sandbox = sandbox
        self.secrets = secrets
        """Opens sealed credentials; the CLI gives every toolset the box of TOOLQ_SECRETS_KEY."""
        self.pinned: dict[str, UpstreamTool] | None = None
        self.tools: dict[str, McpTool] = {}
        """The registered tools, by toolq name."""
        self._lock = threading.Lock()
        self.connections = Connections(
            server.name, self._transport, self._listed, server.connect_timeout
        )
        self._watcher: concurrent.futures.Future[None] | None = None
        self._relisted_at = float("-inf")
        self._relisting = threading.Lock()

    # -- the tool list -----------------------------------------------------------------------

    def load(self) -> None:
        """Register the tools: the pinned manifest's, else the ones the server lists now."""
        if self.server.manifest is not None:
            manifest = Manifest.load(self.server.manifest, self.server.name)
            self.pinned = {tool.name: tool for tool in manifest.tools}
            self.apply(manifest.tools, strict=True)
        else:
            self.apply(self.list_now(), strict=True)

    def list_now(self) -> list[UpstreamTool]:
        """The server's tools as it lists them now, over a connection opened for this only.

        ``ConfigurationError`` when it cannot be reached: a registry cannot be built without
        its tools (pin them with a manifest to build without the server).
        """
        found: list[UpstreamTool] = []
        failure: list[BaseException] = []

        def work() -> None:
            try:
                found.extend(anyio.run(self._list_once))
            except BaseException as exc:
                failure.append(exc)

        # A thread of its own: the caller may be inside a running event loop.
        thread = threading.Thread(target=work, name="toolq-upstream-list", daemon=True)
        thread.start()
        thread.join()
        if failure:
            raise ConfigurationError(
                f"cannot list the tools of MCP server {self.server.name!r}: "
                f"{_describe(failure[0])}; start it, or pin its tools with a manifest"
            ) from None
        return found

    async def _list_once(self) -> list[UpstreamTool]:
        opener, exit = self._transport(None)
        try:
            with anyio.fail_after(self.server.connect_timeout):
                async with connected(opener) as session:
                    return await list_tools(session)
        except BaseException:
            if exit is not None and exit.ended.is_set():
                raise ConfigurationError(f"the server {exit.describe()}") from None
            raise

    def manifest(self) -> Manifest:
        """The manifest of the server's tools as it lists them now (to pin them)."""
        return Manifest(server=self.server.name, tools=self.list_now())

    def apply(self, definitions: list[UpstreamTool], *, strict: bool = False) -> None:
        """Make the registry offer exactly these tools (as the server's ``ToolOptions`` allow).

        ``strict`` (building the registry): a tool that cannot be offered is an error; later
        (a refresh) it is logged and left out.
        """
        with self._lock:
            wanted: dict[str, McpTool] = {}
            for upstream in definitions:
                options = self.server.options_for(upstream.name)
                if options.enabled is False:
                    continue
                name = tool_name(self.server.tool_prefix, upstream.name)
                try:
                    if name in wanted:
                        raise ConfigurationError(
                            f"two tools of MCP server {self.server.name!r} are both named {name!r}"
                        )
                    current = self.tools.get(name)
                    if current is not None and current.upstream == upstream:
                        wanted[name] = current
                    else:
                        wanted[name] = McpTool(self, upstream, name, options)
                except ConfigurationError as exc:
                    if strict:
                        raise
                    log.warning(
                        "tool %r of MCP server %r left out: %s",
                        upstream.name,
                        self.server.name,
                        exc.message,
                    )
            self._swap(wanted, strict)

    def _swap(self, wanted: dict[str, McpTool], strict: bool) -> None:
        for name in set(self.tools) - set(wanted):
            self.registry.unregister(name)
        for name, tool in wanted.items():
            current = self.tools.get(name)
            if current is tool:
                continue
            try:
                if current is None:
                    self.registry.register(tool)
                else:
                    self.registry.replace(tool)
            except DuplicateToolError as exc:
                if strict:
                    raise ConfigurationError(
                        f"MCP server {self.server.name!r}: {exc.message}; give the server "
                        "another prefix"
                    ) from None
                log.warning(
                    "tool %r of MCP server %r left out: %s", name, self.server.name, exc.message
                )
                wanted.pop(name)
        self.tools = wanted

    def relist_for(self, name: str) -> None:
        """List the server's tools again when ``name`` could be a tool it added since.

        A process learns of a new tool by ``list_changed``, which reaches another process
        (the gateway that dispatched a call of it) first: a worker asked to run a tool it
        does not know lists again before it calls the tool unknown. At most once per
        ``RELIST_INTERVAL`` (a Redis writer naming made-up tools does not make a worker
        list on every call); on the shared session when this process holds one, else on a
        connection of its own. A server it cannot reach leaves the registry as it was.
        """
        if self.pinned is not None or not name.startswith(self.server.tool_prefix):
            return
        # One listing at a time: a call asked while one is under way waits for its answer
        # (the tool it names may be in it) rather than being refused by the interval.
        with self._relisting:
            if time.monotonic() - self._relisted_at < RELIST_INTERVAL:
                return
            self._relisted_at = time.monotonic()
            try:
                SessionLoop.current().run(self._relist(), timeout=self.server.connect_timeout + 5)
            except Exception as exc:
                log.warning(
                    "listing the tools of MCP server %r for %r failed: %s",
                    self.server.name,
                    name,
                    _describe(exc),
                )

    async def _relist(self) -> None:
        shared = self.connections.alive("")
        if shared is not None:
            await shared.relist()  # the listing reaches the registry through _listed
        else:
            self.apply(await self._list_once())

    def _listed(self, definitions: list[UpstreamTool]) -> None:
        """A session's listing: the registry follows it, unless the tools are pinned."""
        if self.pinned is None:
            self.apply(definitions)

    # -- connections -------------------------------------------------------------------------

    def _transport(self, tenant: str | None) -> tuple[Opener, StdioExit | None]:
        """How a session for ``tenant`` connects (None: with the server's own credentials)."""
        server = self.server
        if server.url is not None:
            url, sent = server.url, credentials.headers(server, self.secrets, tenant)
            return (lambda: http(url, sent)), None
        exit = StdioExit()
        env = credentials.environment(server, self.secrets)
        return (lambda: self._stdio(env, exit)), exit

    @contextlib.asynccontextmanager
    async def _stdio(self, env: dict[str, str], exit: StdioExit) -> AsyncIterator[Any]:
        with self._launch(env) as launch:
            async with stdio(launch, exit) as streams:
                yield streams

    def _launch(self, env: Mapping[str, str]) -> contextlib.AbstractContextManager[Launch]:
        assert self.server.command is not None
        if self.sandbox is not None:
            return self.sandbox.launch(self.server.command, env)
        return direct(self.server.command, env, self.server.cwd)

    # -- calls -------------------------------------------------------------------------------

    async def call(self, tool: McpTool, arguments: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        """Run one call on the server; the request runs on this process's session loop."""
        # Cancelling the awaiting task (a cancel, a time limit) cancels the request there.
        future = SessionLoop.current().submit(self._call(tool, arguments, ctx))
        return await asyncio.wrap_future(future)

    async def _call(self, tool: McpTool, arguments: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        tenant = ctx.tenant or DEFAULT_TENANT
        scope = self.server.credential_scope(tenant)
        if scope is None:
            raise credentials.no_credentials(self.server, tenant)

        async def report(progress: float, total: float | None, message: str | None) -> None:
            data = {"progress": progress, "total": total, "message": message}
            ctx.progress({key: item for key, item in data.items() if item is not None})

        for _ in range(2):  # a session found dead before the request went out: one more
            session = await self.connections.session(scope, tenant)
            self._check_pinned(tool, session)
            try:
                result = await session.call(tool.upstream.name, arguments, report)
            except SessionLost as lost:
                if lost.sent:
                    raise self._lost(tool) from None
                continue
            return output_of(result, self.server.name, tool.upstream.name)
        raise UpstreamUnavailableError(
            f"upstream MCP server {self.server.name!r} keeps closing its connection",
            server=self.server.name,
        )

    def _lost(self, tool: McpTool) -> Exception:
        what = f"upstream MCP server {self.server.name!r} went away while running {tool.name!r}"
        if tool.idempotent:
            return UpstreamLostError(
                f"{what}; the tool is idempotent: run again on a new connection"
            )
        return WorkerLostError(
            f"{what}; the tool is not idempotent, so it was not run again: its outcome is unknown",
            server=self.server.name,
        )

    def _check_pinned(self, tool: McpTool, session: UpstreamSession) -> None:
        if self.pinned is None:
            return
        live = session.tools.get(tool.upstream.name)
        if live is None:
            change = "no longer lists it"
        elif live.digest != tool.upstream.digest:
            change = "describes it otherwise now (schema or annotations changed)"
        else:
            return
        raise UpstreamChangedError(
            f"{tool.name!r} is pinned by a manifest, and upstream MCP server "
            f"{self.server.name!r} {change}: not run; update the manifest on every process",
            server=self.server.name,
        )

    # -- process lifetime --------------------------------------------------------------------

    def watch(self) -> None:
        """Keep the shared session open in this process, even with no call running.

        The registry then follows the server's ``list_changed`` (a gateway, an API process).
        """
        if self._watcher is None:
            self._watcher = SessionLoop.current().submit(self._watch())

    async def _watch(self) -> None:
        while True:
            try:
                session = await self.connections.session("", None)
                await session.ended()
            except UpstreamUnavailableError as exc:
                log.warning("watching MCP server %r: %s", self.server.name, exc.message)
            await asyncio.sleep(RESTART_DELAY)  # a server that ends at once is not spun on

    def close(self) -> None:
        """Stop watching and close this process's sessions (stdio servers are stopped)."""
        if self._watcher is not None:
            self._watcher.cancel()
            self._watcher = None
        SessionLoop.current().run(self.connections.close(), timeout=30)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, ToolqError):
        return exc.message
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(inner) for inner in exc.exceptions)
    if isinstance(exc, TimeoutError):
        return "it did not answer in time"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
