"""Calls of unknown outcome over HTTP: ``GET /v1/unknown``, ``POST /v1/calls/{id}/resolve``.

A call lost with its worker mid-call, of a tool not safe to run twice, waits in state
``unknown`` for a person (``toolq.approvals.resolving``). Listing them takes the viewer role;
resolving one takes what deciding it would: its tenant and the approver role of its risk,
and the store refuses a submitter's own call, signs and audits the resolution.
"""

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from starlette.concurrency import run_in_threadpool

from toolq.api.auth import Principal
from toolq.api.deciding import may_decide
from toolq.api.limits import decision_body_schema, parse_decision
from toolq.approvals.models import ApprovalRequest, Resolve
from toolq.dispatch.client import Client
from toolq.errors import PayloadError


def build_resolve_router(client: Client, auth: Any) -> APIRouter:
    """The routes of calls of unknown outcome over one ``Client``."""
    router = APIRouter(prefix="/v1")
    Caller = Annotated[Principal, Depends(auth)]

    @router.get("/unknown", response_model=list[ApprovalRequest])
    def unknown(caller: Caller, run_id: str | None = None) -> Any:
        """Calls of unknown outcome, longest lost first (a tenant-bound caller: its own)."""
        caller.require_viewer()
        found = client.approvals.unknown(run_id)
        if caller.tenant is not None:
            found = [r for r in found if r.tenant == caller.tenant]
        return [r.model_dump(mode="json") for r in found]

    @router.post("/calls/{call_id}/resolve", openapi_extra=decision_body_schema(Resolve))
    async def resolve(call_id: str, caller: Caller, request: Request) -> dict[str, Any]:
        """Record the outcome of a call lost mid-call: ``succeeded``, ``failed`` or ``rerun``."""
        await run_in_threadpool(may_decide, client, call_id, caller)  # 401/403/404 first
        body = parse_decision(await request.body(), client.settings, Resolve)
        if body is None:
            raise PayloadError('a resolution needs a body: {"outcome": ..., "note": ...}')
        return await run_in_threadpool(_resolve, call_id, caller, body)

    def _resolve(call_id: str, caller: Principal, body: Resolve) -> dict[str, Any]:
        result = client.resolve_unknown(
            call_id, body.outcome, by=caller.name, note=body.note, result=body.result
        )
        return result.model_dump(mode="json", exclude_none=True)

    return router
