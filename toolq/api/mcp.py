"""``create_mcp_server(client)``: the registry as an MCP server, every call through the queue.

``tools/list`` answers with ``registry.schemas("mcp")`` (active tools only). ``tools/call``
is dispatched like any other provider's call (``Client.dispatch`` of the request's params),
so validation, risk queues, approvals, events and the audit trail all apply; the handler
waits for the result and renders it with toolq's own MCP renderer as a CallToolResult (the
SDK wraps it in the JSON-RPC response).

Runs: calls on one MCP connection share a run. Over HTTP that is the ``Mcp-Session-Id``
(``mcp-<session id>``); over stdio, and for HTTP requests without a session, it is the
server's own run (``--run-id``, or ``mcp-<random>`` per server process).

Over HTTP every request needs ``Authorization: Bearer <token>`` of a principal with the
``submitter`` role (tokens as for the HTTP API), and each call is submitted as that token's
principal, as the same call through the HTTP API is: its owner, the one who may not approve
it. The SDK binds each session to the principal that opened it. Over stdio (the launching
process's own pipe) calls are submitted as the server's ``--principal``.

Approvals: a client that declares the tasks extension gets a task for a call that parks,
answered at once (``toolq.api.mcp_tasks``). For any other client, a call that needs one is
waited on for up to ``approval_wait`` seconds; then the tool result is an error naming the
call id, for ``toolq approvals approve <id>``. The server
remembers the calls it answered before they were final (pending, or past ``call_timeout``):
the same tool with the same arguments in the same run re-attaches to that call instead of
dispatching a second one, and returns its result once it is final (or the same error while
it still waits). Once a final result has been returned, an identical call is a new call.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib.metadata import version
from typing import Any

import anyio
import mcp_types as types
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from toolq.api import mcp_tasks
from toolq.api.auth import AuthenticationError, Authenticator, Principal
from toolq.api.errors import error_body
from toolq.api.mcp_tasks import McpTasks
from toolq.dispatch.client import Client
from toolq.dispatch.providers import to_messages
from toolq.errors import ReplicationError, ToolqError, WaitTimeoutError
from toolq.models import CallResult, CallStatus, ProviderFormat
from toolq.quotas import DEFAULT_TENANT

SESSION_HEADER = "mcp-session-id"


@dataclass(frozen=True)
class McpOptions:
    """How the MCP server dispatches and waits."""

    run_id: str | None = None
    """Run of every call; ``None``: per HTTP session, else one random run per process."""
    principal: str = "mcp"
    """Submitter recorded on every call over stdio (it may not approve its own calls); over
    HTTP each call's submitter is its token's principal."""
    tenant: str = DEFAULT_TENANT
    """Tenant every call is run for; over HTTP a token bound to another tenant is refused."""
    approval_wait: float = 60.0
    """Seconds to wait for a decision before answering that the call is pending."""
    call_timeout: float | None = None
    """Seconds from the request on to wait for a call; ``None``: until it is final."""


class McpBridge:
    """Turns MCP ``tools/list`` and ``tools/call`` into registry schemas and dispatches."""

    def __init__(self, client: Client, options: McpOptions | None = None) -> None:
        self.client = client
        self.options = options or McpOptions()
        self.default_run_id = self.options.run_id or f"mcp-{uuid.uuid4().hex}"
        self._parked: dict[tuple[str, str, str], str] = {}
        self._lock = threading.Lock()

    def list_tools(self) -> list[types.Tool]:
        """The active tools as MCP ``Tool`` definitions."""
        return [types.Tool.model_validate(s) for s in self.client.registry.schemas("mcp")]

    def run_id_for(self, session_id: str | None) -> str:
        """The run of a connection: fixed, per HTTP session, or the process's own."""
        if self.options.run_id is None and session_id:
            return f"mcp-{session_id}"
        return self.default_run_id

    def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None,
        run_id: str,
        caller: Principal | None = None,
        parked: Callable[[CallResult], dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """Dispatch one call (or re-attach to its unfinished twin), wait, render it (blocking).

        ``caller``: the token's principal over HTTP, who submits the call; ``None`` (stdio):
        the server's own ``principal``. ``parked``: what to answer at once for a call that
        awaits approval (a task), instead of waiting.
        """
        principal = self.options.principal if caller is None else caller.name
        tenant = self.options.tenant if caller is None else caller.tenant_for(self.options.tenant)
        # Per submitter: a call is re-attached only for the principal that dispatched it.
        key = (principal, run_id, _fingerprint(name, arguments))
        with self._lock:
            call_id = self._parked.get(key)
        if call_id is None:
            # Bare params: the SDK owns the JSON-RPC envelope, so the answer is a CallToolResult.
            payload = {"name": name, "arguments": dict(arguments or {})}
            try:
                batch = self.client.dispatch(
                    payload,
                    run_id=run_id,
                    principal=principal,
                    format="mcp",
                    admin=caller is not None and caller.has("admin"),
                    tenant=tenant,
                )
            except ToolqError as exc:  # e.g. a fixed --run-id another principal owns
                text = f"{exc.code}: {exc.message}"
                return {"content": [{"type": "text", "text": text}], "isError": True}
            call_id = batch.call_ids[0]
        if parked is not None:
            current = self._current(call_id)
            if current is not None and current.status is CallStatus.AWAITING_APPROVAL:
                with self._lock:
                    self._parked.pop(key, None)  # the task follows it from now on
                return parked(current)
        result = self._settle(call_id, run_id)
        with self._lock:
            if not result.is_final:
                self._parked[key] = call_id
            else:
                self._parked.pop(key, None)
        return render(result)

    def _settle(self, call_id: str, run_id: str) -> CallResult:
        """Wait for the final result, or give up on a parked call after ``approval_wait``."""
        start = time.monotonic()
        while True:
            result = self._current(call_id)
            if result is not None and result.is_final:
                return result
            elapsed = time.monotonic() - start
            if result is not None and result.status is CallStatus.AWAITING_APPROVAL:
                timeout: float | None = self.options.approval_wait - elapsed
            elif self.options.call_timeout is not None:
                timeout = self.options.call_timeout - elapsed
            else:
                timeout = None
            if timeout is not None and timeout <= 0:  # (unconfirmed still: ReplicationError)
                return result if result is not None else self.client.result(call_id)
            try:  # (a final state not confirmed yet: the wait confirms it)
                return self.client.wait([call_id], timeout=timeout, run_id=run_id)[0]
            except WaitTimeoutError:
                continue

    def _current(self, call_id: str) -> CallResult | None:
        """The call's state now (None: final on the master, not confirmed by the replicas).

        With ``TOOLQ_MIN_REPLICAS_ACK`` a read does not report a final state the replicas
        do not hold yet (``ReplicationError``); the wait that follows confirms it.
        """
        try:
            return self.client.result(call_id)
        except ReplicationError:
            return None


def render(result: CallResult) -> dict[str, Any]:
    """A ``CallToolResult`` in wire form, final or not; ``_meta.toolq`` names the call."""
    meta = {
        "toolq": {"call_id": result.call_id, "run_id": result.run_id, "status": result.status.value}
    }
    if result.is_final:
        return {**to_messages([result], ProviderFormat.MCP)[0], "_meta": meta}
    if result.status is CallStatus.AWAITING_APPROVAL:
        text = (
            f"call {result.call_id} ({result.name}) is awaiting approval; a human can approve "
            f"it with `toolq approvals approve {result.call_id} --by NAME --app MODULE:REGISTRY` "
            "(or in the dashboard). Call the tool "
            "again with the same arguments to get its result."
        )
    else:
        text = f"call {result.call_id} ({result.name}) is still {result.status.value}."
    return {"content": [{"type": "text", "text": text}], "isError": True, "_meta": meta}


def _fingerprint(name: str, arguments: Mapping[str, Any] | None) -> str:
    canonical = json.dumps([name, arguments or {}], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


class TokenUser(AuthenticatedUser):
    """The caller of an HTTP request as the MCP SDK sees it: it binds sessions to it."""

    def __init__(self, caller: Principal) -> None:
        claims = {"iss": "toolq", "tenant": caller.tenant}
        token = AccessToken(
            token="",  # the SDK never needs the bearer token itself
            client_id=caller.name,
            scopes=sorted(caller.roles),
            subject=caller.tenant,
            claims=claims,
        )
        super().__init__(token)
        self.caller = caller


def _caller(ctx: ServerRequestContext[Any, Any]) -> Principal | None:
    """The token's principal of an HTTP request; ``None`` over stdio (no HTTP request).

    An HTTP request without one never gets here (``RequireSubmitter``); if it did, it
    would be refused rather than submitted as the server's principal.
    """
    if ctx.request is None:
        return None
    scope = getattr(ctx.request, "scope", None)
    user = scope.get("user") if isinstance(scope, dict) else None
    if not isinstance(user, TokenUser):
        raise AuthenticationError("an MCP request over HTTP without an authenticated caller")
    return user.caller


def _session_id(ctx: ServerRequestContext[Any, Any]) -> str | None:
    headers = getattr(ctx.request, "headers", None)
    if headers is None:
        return None
    value = headers.get(SESSION_HEADER)
    return str(value) if value else None


def create_mcp_server(client: Client, options: McpOptions | None = None) -> Server[Any]:
    """A low-level MCP server whose tools are the client's registry, run through its queue.

    It serves the tasks extension (``toolq.api.mcp_tasks``) to clients that declare it.
    """
    bridge = McpBridge(client, options)
    tasks = McpTasks(client, bridge.options.principal, render)

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=await anyio.to_thread.run_sync(bridge.list_tools))

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | dict[str, Any]:
        run_id = bridge.run_id_for(_session_id(ctx))
        caller = _caller(ctx)
        rendered = await anyio.to_thread.run_sync(
            bridge.call_tool,
            params.name,
            params.arguments,
            run_id,
            caller,
            tasks.created if mcp_tasks.declared(ctx) else None,
            abandon_on_cancel=True,
        )
        if rendered.get("resultType") == "task":
            return rendered
        return types.CallToolResult.model_validate(rendered)

    server: Server[Any] = Server(
        "toolq",
        version=version("toolq"),
        instructions=client.registry.instructions() or None,
        on_list_tools=list_tools,
    )
    # Registered as a plain handler: to a client with the tasks extension it may answer a
    # task, which the typed ``on_call_tool`` does not admit.
    server.add_request_handler("tools/call", types.CallToolRequestParams, call_tool)
    mcp_tasks.install(server, tasks, _caller)
    return server


async def serve_stdio(server: Server[Any]) -> None:
    """Serve one MCP client over this process's stdin/stdout."""
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


class RequireSubmitter:
    """Refuses requests without a ``submitter`` token (401, 403), or of another tenant (403).

    An accepted request carries its caller as the ASGI scope's ``user`` (``TokenUser``).
    """

    def __init__(self, app: ASGIApp, auth: Authenticator, tenant: str = DEFAULT_TENANT) -> None:
        self.app = app
        self.auth = auth
        self.tenant = tenant

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass authorised requests (and lifespan events) on to the MCP app."""
        if scope["type"] == "http":
            try:
                caller = self.auth(Request(scope))
                caller.require("submitter")
                caller.tenant_for(self.tenant)
                scope["user"] = TokenUser(caller)
            except AuthenticationError as exc:
                refusal = JSONResponse(
                    error_body(exc.code, exc.message),
                    status_code=401,
                    headers={"WWW-Authenticate": "Bearer"},
                )
                await refusal(scope, receive, send)
                return
            except ToolqError as exc:
                await JSONResponse(error_body(exc.code, exc.message), status_code=403)(
                    scope, receive, send
                )
                return
        await self.app(scope, receive, send)


def http_app(
    server: Server[Any],
    auth: Authenticator,
    host: str = "127.0.0.1",
    tenant: str = DEFAULT_TENANT,
) -> ASGIApp:
    """The SDK's Streamable HTTP app (``/mcp``) behind a ``submitter`` token of ``tenant``."""
    app: Starlette = server.streamable_http_app(host=host)
    return RequireSubmitter(app, auth, tenant)
