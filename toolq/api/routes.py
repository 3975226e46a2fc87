"""The ``/v1`` endpoints."""

import json
import time
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool

from toolq.api.auth import Principal
from toolq.api.limits import parse_body
from toolq.approvals.models import ApprovalRequest
from toolq.dispatch.client import Client
from toolq.models import CallResult, Event, ProviderFormat
from toolq.results.events import Subscription

HEARTBEAT_SECONDS = 15.0


class ApproveBody(BaseModel):
    """Optional edits and checks of an approval."""

    arguments: dict[str, Any] | None = None
    digest: str | None = None
    note: str | None = None
    always: bool = False


class DenyBody(BaseModel):
    """Why a call is denied (the model reads it)."""

    reason: str = ""
    always: bool = False


def _call_json(result: CallResult) -> dict[str, Any]:
    return result.model_dump(mode="json", exclude_none=True)


def build_router(client: Client, auth: Any) -> APIRouter:
    """All ``/v1`` routes over one ``Client``."""
    router = APIRouter(prefix="/v1")
    Caller = Annotated[Principal, Depends(auth)]

    @router.get("/tools")
    def tools(caller: Caller, format: str = "openai", strict: bool = False) -> list[dict[str, Any]]:
        """Tool definitions in a provider's format."""
        caller.require_viewer()
        return client.registry.schemas(ProviderFormat.parse(format), strict=strict)

    @router.post("/runs/{run_id}/calls", status_code=202)
    async def dispatch(
        run_id: str,
        request: Request,
        caller: Caller,
        behavior: str | None = None,
        idempotency_key: Annotated[str | None, Header()] = None,
    ) -> dict[str, Any]:
        """Dispatch the tool calls of a model response (any format ``dispatch`` accepts)."""
        caller.require("submitter")
        payload = parse_body(await request.body(), client.settings)
        batch = await run_in_threadpool(
            lambda: client.dispatch(
                payload,
                run_id=run_id,
                behavior=behavior,
                idempotency_key=idempotency_key,
                principal=caller.name,
                admin=caller.has("admin"),
            )
        )
        return {
            "run_id": batch.run_id,
            "format": batch.format.value if batch.format else None,
            "calls": [
                {
                    "call_id": c.call_id,
                    "tool_call_id": c.tool_call_id,
                    "name": c.name,
                    "status": c.status.value,
                    "duplicate": c.duplicate,
                }
                for c in batch.calls
            ],
        }

    @router.get("/runs/{run_id}/calls")
    def run_calls(run_id: str, caller: Caller) -> list[dict[str, Any]]:
        """Current state of every call of a run."""
        caller.require_viewer()
        return [_call_json(r) for r in client.results(run_id)]

    @router.get("/calls/{call_id}")
    def get_call(call_id: str, caller: Caller) -> dict[str, Any]:
        """One call's state and, once final, its outcome."""
        caller.require_viewer()
        return _call_json(client.result(call_id))

    @router.get("/runs/{run_id}/messages")
    def messages(run_id: str, caller: Caller, format: str | None = None) -> list[dict[str, Any]]:
        """The run's results as the provider's tool-result messages."""
        caller.require_viewer()
        return client.to_messages(run_id, ProviderFormat.parse(format) if format else None)

    @router.get("/runs/{run_id}/events", response_model=None)
    async def events(
        run_id: str,
        request: Request,
        caller: Caller,
        follow: bool = True,
        after: str | None = None,
        last_event_id: Annotated[str | None, Header()] = None,
    ) -> Any:
        """Server-Sent Events (id = stream id; resumes after ``Last-Event-ID``), or JSON."""
        caller.require_viewer()
        start = last_event_id or after
        if not follow:
            backlog = await run_in_threadpool(client.log.read, run_id, start)
            return [e.model_dump(mode="json") for e in backlog]
        return StreamingResponse(
            _sse(client, run_id, start, request),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    @router.get("/approvals")
    def pending(
        caller: Caller,
        run_id: str | None = None,
        risk: str | None = None,
        tool: str | None = None,
    ) -> list[ApprovalRequest]:
        """Calls awaiting a decision (filters: run, risk, tool)."""
        caller.require_viewer()
        return client.approvals.pending(run_id=run_id, risk=risk, tool=tool)

    @router.get("/approvals/{call_id}")
    def approval(call_id: str, caller: Caller) -> ApprovalRequest:
        """A call as approvers see it: arguments, digest, preview, diff."""
        caller.require_viewer()
        return client.approvals.get(call_id)

    @router.post("/approvals/{call_id}/approve")
    def approve(call_id: str, caller: Caller, body: ApproveBody | None = None) -> dict[str, Any]:
        """Approve (optionally with edited arguments, and the digest you reviewed)."""
        caller.require_approver(client.approvals.get(call_id).risk)
        decision = body or ApproveBody()
        result = client.approvals.approve(
            call_id,
            caller.name,
            arguments=decision.arguments,
            note=decision.note,
            digest=decision.digest,
            always=decision.always,
        )
        return _call_json(result)

    @router.post("/approvals/{call_id}/deny")
    def deny(call_id: str, caller: Caller, body: DenyBody | None = None) -> dict[str, Any]:
        """Deny with a reason the model will read."""
        caller.require_approver(client.approvals.get(call_id).risk)
        decision = body or DenyBody()
        result = client.approvals.deny(
            call_id, caller.name, decision.reason, always=decision.always
        )
        return _call_json(result)

    @router.post("/calls/{call_id}/cancel")
    def cancel(call_id: str, caller: Caller) -> dict[str, Any]:
        """Cancel: at once when queued or parked, cooperatively when running (run owner only)."""
        caller.require("submitter")
        return _call_json(
            client.cancel(call_id, principal=caller.name, admin=caller.has("admin"))
        )

    @router.post("/calls/{call_id}/undo")
    def undo(call_id: str, caller: Caller, timeout: float = Query(30, gt=0, le=300)) -> Any:
        """Run the call's undo handler on a worker; the ``call.undone`` event.

        Run owner only; undoing a gated tool also needs the approver role of its risk.
        """
        caller.require("submitter")
        admin = caller.has("admin")
        if client.owners.check_call(call_id, caller.name, admin=admin, action="undo calls of"):
            gate = client.undo_gate(call_id)
            if gate is not None:
                caller.require_approver(gate)
        event = client.undo(call_id, timeout=timeout, principal=caller.name, admin=admin)
        return JSONResponse(event.model_dump(mode="json"))

    return router


def sse_frame(event: Event) -> str:
    """One Server-Sent Event."""
    data = json.dumps(event.model_dump(mode="json"), separators=(",", ":"))
    return f"id: {event.id}\nevent: {event.type.value}\ndata: {data}\n\n"


async def _sse(
    client: Client, run_id: str, after: str | None, request: Request
) -> AsyncIterator[str]:
    subscription = await run_in_threadpool(
        Subscription, client.redis, client.keys.run_channel(run_id)
    )
    last = after
    beat = time.monotonic()
    try:
        yield "retry: 1000\n\n"
        while not await request.is_disconnected():
            for event in await run_in_threadpool(client.log.read, run_id, last):
                last = event.id
                yield sse_frame(event)
            if time.monotonic() - beat > HEARTBEAT_SECONDS:
                beat = time.monotonic()
                yield ": keep-alive\n\n"
            await run_in_threadpool(subscription.wait, 1.0)
    finally:
        subscription.close()
