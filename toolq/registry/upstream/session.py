"""``UpstreamSession``: one MCP client session to an upstream server, kept open by one task.

The session lists the server's tools when it starts and again on each
``notifications/tools/list_changed``, handing every listing to ``on_listed``. A call that
finds the connection gone raises ``SessionLost``: the caller decides what a lost call
means for its tool (re-run if idempotent, ``worker_lost`` otherwise).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from importlib.metadata import version
from typing import Any

import anyio
import mcp_types as types
from mcp.client.session import ClientSession, IncomingMessage, MessageHandlerFnT
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from toolq.errors import UpstreamError, UpstreamUnavailableError
from toolq.registry.upstream.definitions import UpstreamTool
from toolq.registry.upstream.transports import Opener, StdioExit

log = logging.getLogger("toolq.upstream")

CLIENT = types.Implementation(name="toolq", version=version("toolq"))
Listed = Callable[[list[UpstreamTool]], None]


class SessionLost(Exception):
    """The connection ended before a request was answered.

    Not a ``ToolqError``: the toolset turns it into one by its tool's idempotency.

    ``sent``: the request may have reached the server (its outcome is unknown); False when
    the session was found closed before it went out.
    """

    def __init__(self, sent: bool) -> None:
        super().__init__("sent" if sent else "not sent")
        self.sent = sent


@contextlib.asynccontextmanager
async def connected(
    open_transport: Opener,
    on_message: MessageHandlerFnT | None = None,
) -> AsyncIterator[ClientSession]:
    """An initialized client session over a fresh transport."""
    async with (
        open_transport() as (read_stream, write_stream),
        ClientSession(
            read_stream, write_stream, message_handler=on_message, client_info=CLIENT
        ) as session,
    ):
        await session.initialize()
        yield session


async def list_tools(session: ClientSession) -> list[UpstreamTool]:
    """Every tool the server lists, page after page."""
    found: list[UpstreamTool] = []
    cursor: str | None = None
    while True:
        params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
        page = await session.list_tools(params=params)
        found.extend(UpstreamTool.of(tool) for tool in page.tools)
        cursor = page.next_cursor
        if not cursor:
            return found


class UpstreamSession:
    """A session to one server (one tenant's credentials), run by ``run`` until ``close``."""

    def __init__(
        self,
        server: str,
        open_transport: Opener,
        *,
        exit: StdioExit | None = None,
        on_listed: Listed | None = None,
    ) -> None:
        self.server = server
        self.open_transport = open_transport
        self.exit = exit
        self.on_listed = on_listed
        self.tools: dict[str, UpstreamTool] = {}
        """The server's tools by name, as it last listed them."""
        self.alive = False
        self._client: ClientSession | None = None
        self._closing: anyio.Event | None = None
        self._tasks: anyio.abc.TaskGroup | None = None
        self._runner: asyncio.Task[None] | None = None

    async def start(self, timeout: float) -> None:
        """Connect, initialize and list in the background, within ``timeout`` seconds.

        ``UpstreamUnavailableError`` when that fails or takes longer.
        """
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = loop.create_future()
        self._closing = anyio.Event()
        self._runner = loop.create_task(self._run(ready))
        try:
            await asyncio.wait_for(asyncio.shield(ready), timeout)
        except TimeoutError:
            self._runner.cancel()
            raise UpstreamUnavailableError(
                f"upstream MCP server {self.server!r} did not start in {timeout:g}s",
                server=self.server,
            ) from None
        except Exception as exc:
            raise UpstreamUnavailableError(
                f"upstream MCP server {self.server!r} cannot be reached: {_reason(exc, self.exit)}",
                server=self.server,
            ) from None

    async def _run(self, ready: asyncio.Future[None]) -> None:
        assert self._closing is not None
        try:
            async with (
                connected(self.open_transport, self._on_message) as client,
                anyio.create_task_group() as tasks,
            ):
                self._client, self._tasks = client, tasks
                await self._list()
                self.alive = True
                ready.set_result(None)
                if self.exit is not None:
                    tasks.start_soon(self._watch_exit, self.exit)
                await self._closing.wait()
                tasks.cancel_scope.cancel()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else SessionLost(False))
            elif not isinstance(exc, anyio.get_cancelled_exc_class()):
                log.warning("session to upstream MCP server %r ended: %r", self.server, exc)
            if not isinstance(exc, Exception):
                raise
        finally:
            self.alive = False
            self._client = None

    async def _watch_exit(self, exit: StdioExit) -> None:
        await exit.ended.wait()
        log.warning(
            "upstream MCP server %r %s; it is started again for the next call",
            self.server,
            exit.describe(),
        )
        self.close()

    async def _list(self) -> None:
        assert self._client is not None
        listed = await list_tools(self._client)
        self.tools = {tool.name: tool for tool in listed}
        if self.on_listed is not None:
            self.on_listed(listed)

    async def _on_message(self, message: IncomingMessage) -> None:
        if isinstance(message, types.ToolListChangedNotification) and self._tasks is not None:
            self._tasks.start_soon(self._relist)
        elif isinstance(message, Exception):
            log.debug("upstream MCP server %r transport: %r", self.server, message)

    async def relist(self) -> None:
        """List the server's tools again now (``on_listed`` gets the listing)."""
        await self._list()

    async def _relist(self) -> None:
        try:
            await self._list()
        except Exception as exc:  # the next notification, or the next session, lists again
            log.warning("listing the tools of upstream MCP server %r failed: %r", self.server, exc)

    async def call(
        self, name: str, arguments: dict[str, Any], progress: ProgressFnT | None
    ) -> types.CallToolResult:
        """``tools/call``; cancelling the awaiting task sends ``notifications/cancelled``.

        ``SessionLost`` if the connection ends first, ``UpstreamError`` for a JSON-RPC error.
        """
        client = self._client
        if client is None or not self.alive:
            raise SessionLost(sent=False)
        try:
            return await client.call_tool(name, arguments, progress_callback=progress)
        except MCPError as exc:
            if exc.error.code == types.CONNECTION_CLOSED:
                self.close()
                raise SessionLost(sent=True) from None
            raise UpstreamError(
                f"upstream MCP server {self.server!r} refused the call of {name!r}: "
                f"{exc.error.message} (JSON-RPC error {exc.error.code})",
                server=self.server,
                rpc_code=exc.error.code,
            ) from None
        except ValidationError:
            raise UpstreamError(
                f"upstream MCP server {self.server!r} answered the call of {name!r} with "
                "something that is not a tool result",
                server=self.server,
            ) from None
        except Exception as exc:
            # The transport failed under the request: whether the server ran it is unknown.
            log.warning("upstream MCP server %r: %r during a call", self.server, exc)
            self.close()
            raise SessionLost(sent=True) from None

    def close(self) -> None:
        """End the session (its task stops the transport: a stdio server is stopped)."""
        self.alive = False
        if self._closing is not None:
            self._closing.set()

    async def ended(self) -> None:
        """Wait until the session has ended (closed, or its connection lost)."""
        if self._runner is not None:
            await asyncio.wait({self._runner})

    async def aclose(self) -> None:
        """``close`` and wait for the transport to stop."""
        self.close()
        if self._runner is not None:
            with contextlib.suppress(BaseException):
                await self._runner


def _reason(exc: BaseException, exit: StdioExit | None) -> str:
    """Why a session did not start, as a person reads it."""
    if exit is not None and exit.ended.is_set():
        return f"it {exit.describe()}"
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_reason(inner, None) for inner in exc.exceptions)
    if isinstance(exc, MCPError):
        return f"{exc.error.message} (JSON-RPC error {exc.error.code})"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
