"""The MCP tasks extension (``io.modelcontextprotocol/tasks``, 2026-07-28) on toolq's server.

A client that declares the extension in a request's capabilities gets a gated
``tools/call`` answered at once with a task (``resultType: "task"``) instead of a blocked
request; one without it keeps the blocking answer. The task is the toolq call itself: its
id is the call id, so it lives as long as the call's record in Redis, across restarts of
the MCP server. ``tasks/get`` maps the call's state:

- awaiting approval: ``input_required``, with one URL-mode elicitation pointing at the
  call's approval page (``/approve/{call_id}`` under ``TOOLQ_PUBLIC_URL``), where an
  authenticated approver decides; once the client answered it (``tasks/update``), or
  without a public URL, ``working`` with a status message. The MCP client's answer never
  decides anything: it only says the person was shown the page.
- queued, running: ``working``; cancelled: ``cancelled``; any other final state:
  ``completed`` with the ``CallToolResult`` toolq renders (a denial or failure is a result
  with ``isError``, as the spec asks).

``tasks/cancel`` cancels the toolq call (its submitter's right, as ``POST .../cancel``).
Only the call's submitter (the HTTP token's principal, or the stdio server's) reaches a
task; any other task id is unknown. The SDK (``mcp`` 2.3) provides the extension seams
(capabilities, extra request methods, claimed result types) but not this extension.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any
from urllib.parse import quote

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError
from pydantic import Field

from toolq.api.auth import Principal
from toolq.dispatch.client import Client
from toolq.errors import CallNotFoundError, NotRunOwnerError, ReplicationError
from toolq.models import CallResult, CallStatus

EXTENSION = "io.modelcontextprotocol/tasks"
APPROVAL_INPUT = "approval"
"""The key of the one input request a task ever makes: the approval page."""
POLL_MS = 1000


class TaskStatus(StrEnum):
    """A task's status, as the extension names them."""

    WORKING = "working"
    INPUT_REQUIRED = "input_required"
    COMPLETED = "completed"
    FAILED = "failed"
    """A JSON-RPC error during the work: never a toolq call's (those complete, ``isError``)."""
    CANCELLED = "cancelled"


class TaskParams(types.RequestParams):
    """``tasks/get`` and ``tasks/cancel``: which task."""

    task_id: str = Field(alias="taskId")


class UpdateTaskParams(TaskParams):
    """``tasks/update``: answers to the task's input requests."""

    input_responses: dict[str, Any] = Field(alias="inputResponses", default_factory=dict)


def declared(ctx: ServerRequestContext[Any, Any]) -> bool:
    """True when the request's client declared the tasks extension."""
    capabilities = ctx.session.client_capabilities
    extensions = capabilities.extensions if capabilities is not None else None
    return bool(extensions) and EXTENSION in (extensions or {})


def _iso(ts: float | None) -> str:
    moment = datetime.fromtimestamp(ts or 0, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class McpTasks:
    """Tasks over toolq calls, for one MCP server's client and principal (stdio)."""

    def __init__(
        self, client: Client, principal: str, render: Callable[[CallResult], dict[str, Any]]
    ) -> None:
        self.client = client
        self.settings = client.settings
        self.principal = principal
        self.render = render

    def page(self, call_id: str) -> str | None:
        """The call's approval page, when ``TOOLQ_PUBLIC_URL`` says where it is."""
        base = self.settings.public_url
        return f"{base.rstrip('/')}/approve/{quote(call_id, safe='')}" if base else None

    def created(self, result: CallResult) -> dict[str, Any]:
        """The ``CreateTaskResult`` of a call that parked (durable: the call is in Redis)."""
        created, updated = self._times(result.call_id)
        return {
            "resultType": "task",
            "taskId": result.call_id,
            "status": TaskStatus.WORKING.value,
            "statusMessage": f"call {result.call_id} ({result.name}) is awaiting approval",
            "createdAt": _iso(created),
            "lastUpdatedAt": _iso(updated),
            "ttlMs": int(self.settings.result_ttl * 1000),
            "pollIntervalMs": POLL_MS,
        }

    def get(self, task_id: str, caller: Principal | None) -> dict[str, Any]:
        """The task's state now (``GetTaskResult``)."""
        self._check(task_id, caller, "read")
        try:
            result = self.client.result(task_id)
        except ReplicationError:  # final on the master alone: not complete until confirmed
            result = None
        created, updated = self._times(task_id)
        task: dict[str, Any] = {
            "resultType": "complete",
            "taskId": task_id,
            "createdAt": _iso(created),
            "lastUpdatedAt": _iso(updated),
            "ttlMs": int(self.settings.result_ttl * 1000),
            "pollIntervalMs": POLL_MS,
        }
        if result is None:
            confirming = f"call {task_id} finished; waiting for the replicas to confirm it"
            return {**task, "status": TaskStatus.WORKING.value, "statusMessage": confirming}
        if result.status is CallStatus.CANCELLED:
            return {
                **task,
                "status": TaskStatus.CANCELLED.value,
                "statusMessage": "the call was cancelled",
            }
        if result.is_final:
            return {**task, "status": TaskStatus.COMPLETED.value, "result": self.render(result)}
        if result.status is not CallStatus.AWAITING_APPROVAL:
            return {
                **task,
                "status": TaskStatus.WORKING.value,
                "statusMessage": f"{result.status.value}",
            }
        page = self.page(task_id)
        if page is None or self._shown(task_id):
            waiting = f"call {task_id} ({result.name}) is waiting for an approver's decision"
            return {**task, "status": TaskStatus.WORKING.value, "statusMessage": waiting}
        elicit = {
            "method": "elicitation/create",
            "params": {
                "mode": "url",
                "message": (
                    f"The tool call {result.name} needs an approver's decision. Open the "
                    "approval page: an approver signs in there to approve or deny it."
                ),
                "url": page,
            },
        }
        return {
            **task,
            "status": TaskStatus.INPUT_REQUIRED.value,
            "inputRequests": {APPROVAL_INPUT: elicit},
        }

    def update(self, task_id: str, responses: dict[str, Any], caller: Principal | None) -> None:
        """Note that the approval page was shown; decides nothing (an approver does)."""
        self._check(task_id, caller, "update")
        if APPROVAL_INPUT in responses:
            cell = self.client.cell_for_call(task_id)
            cell.redis.set(cell.keys.mcp_task_shown(task_id), "1", ex=self.settings.result_ttl)

    def cancel(self, task_id: str, caller: Principal | None) -> None:
        """Cancel the toolq call (cooperatively once it runs)."""
        self._check(task_id, caller, "cancel")
        principal = self.principal if caller is None else caller.name
        admin = caller is not None and caller.has("admin")
        self.client.cancel(task_id, principal=principal, admin=admin)

    def _check(self, task_id: str, caller: Principal | None, action: str) -> None:
        principal = self.principal if caller is None else caller.name
        try:
            owners = self.client.cell_for_call(task_id).owners
            run = owners.check_call(
                task_id,
                principal,
                admin=caller is not None and caller.has("admin"),
                action=f"{action} the task of",
                tenant=None if caller is None else caller.tenant,
            )
        except (CallNotFoundError, NotRunOwnerError):
            run = None
        if run is None:
            # Another principal's task is as unknown as a task that never was.
            raise MCPError(types.INVALID_PARAMS, f"unknown task {task_id!r}")

    def _shown(self, task_id: str) -> bool:
        cell = self.client.cell_for_call(task_id)
        return bool(cell.redis.exists(cell.keys.mcp_task_shown(task_id)))

    def _times(self, call_id: str) -> tuple[float | None, float | None]:
        cell = self.client.cell_for_call(call_id)
        raw: Any = cell.redis.hmget(cell.keys.call(call_id), ["created_at", "updated_at"])
        created, updated = (float(v) if v else None for v in raw)
        return created, updated or created


def install(server: Server[Any], tasks: McpTasks, caller_of: Any) -> None:
    """Serve ``tasks/get``, ``tasks/update`` and ``tasks/cancel`` and advertise the extension.

    ``caller_of(ctx)`` is the request's principal (None over stdio).
    """

    async def get(ctx: ServerRequestContext[Any, Any], params: TaskParams) -> dict[str, Any]:
        caller = caller_of(ctx)
        return await anyio.to_thread.run_sync(tasks.get, params.task_id, caller)

    async def update(
        ctx: ServerRequestContext[Any, Any], params: UpdateTaskParams
    ) -> dict[str, Any]:
        caller = caller_of(ctx)
        await anyio.to_thread.run_sync(tasks.update, params.task_id, params.input_responses, caller)
        return {"resultType": "complete"}

    async def cancel(ctx: ServerRequestContext[Any, Any], params: TaskParams) -> dict[str, Any]:
        caller = caller_of(ctx)
        await anyio.to_thread.run_sync(tasks.cancel, params.task_id, caller)
        return {"resultType": "complete"}

    server.add_request_handler("tasks/get", TaskParams, get)
    server.add_request_handler("tasks/update", UpdateTaskParams, update)
    server.add_request_handler("tasks/cancel", TaskParams, cancel)
    server.extensions[EXTENSION] = {}
