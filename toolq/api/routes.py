"""The ``/v1`` endpoints.

A caller whose token is bound to a tenant acts for that tenant only: its dispatches go to
it (a request naming another is a 403 ``wrong_tenant``), and every run, call, event stream
and approval of another tenant is refused as another owner's is (403 ``not_owner``).
"""

import asyncio
import json
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.concurrency import run_in_threadpool

from toolq.api.auth import ForbiddenError, Principal
from toolq.api.cells import CellParts
from toolq.api.deciding import may_decide
from toolq.api.limits import (
    decision_body_schema,
    digest_required,
    parse_body,
    parse_decision,
    reviewed_required,
)
from toolq.api.paging import DEFAULT, Limit, PageCursor, TimeBound, paged, time_bounds
from toolq.approvals.authority import decided_risk
from toolq.approvals.models import (
    ApprovalRequest,
    Approve,
    ApproveRun,
    Deny,
    UndoData,
    UndoRequest,
)
from toolq.dispatch.client import Client
from toolq.dispatch.submission import Submission
from toolq.errors import (
    NotAuthorizedError,
    NotRunOwnerError,
    PayloadError,
    ToolqError,
    UndoAwaitingApprovalsError,
    WrongTenantError,
)
from toolq.models import REFUSED_NOT_REVIEWED, CallResult, Event, ProviderFormat, RiskLevel
from toolq.results.events import check_stream_id, stream_id_key
from toolq.results.hub import EventHub, Listener
from toolq.results.runs import RunSummary

HEARTBEAT_SECONDS = 15.0
DISCONNECT_CHECK_SECONDS = 1.0


def _call_json(result: CallResult) -> dict[str, Any]:
    return result.model_dump(mode="json", exclude_none=True)


def build_router(client: Client, auth: Any, parts: CellParts) -> APIRouter:
    """All ``/v1`` routes over one ``Client``; event streams are served by ``parts``' hubs."""
    router = APIRouter(prefix="/v1")
    Caller = Annotated[Principal, Depends(auth)]

    def stream_reader(run_id: str, request: Request, ticket: str | None = None) -> Principal:
        # A ticket opens this run's event stream only; anything else needs the header.
        if ticket is not None:
            return parts.tickets_for(run_id).redeem(ticket, run_id)
        principal: Principal = auth(request)
        return principal

    Reader = Annotated[Principal, Depends(stream_reader)]
    frames = FrameCache()

    # With cells a run's (and a call's) owner is recorded in its cell.
    def run_of_tenant(run_id: str, caller: Principal, action: str = "read") -> None:
        owners = client.cell_for_run(run_id).owners
        owners.check_tenant(run_id, caller.tenant, principal=caller.name, action=action)

    def call_of_tenant(call_id: str, caller: Principal, action: str = "read") -> None:
        owners = client.cell_for_call(call_id).owners
        owners.check_call_tenant(call_id, caller.tenant, principal=caller.name, action=action)

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
        tenant: str | None = None,
    ) -> dict[str, Any]:
        """Dispatch the tool calls of a model response (any format ``dispatch`` accepts).

        The tenant is the token's when it names one (a request naming another: 403
        ``wrong_tenant``); else ``?tenant=`` or a top-level ``"tenant"`` of a JSON object
        body, else ``default``. Provider call ids (or the ``Idempotency-Key``) already used
        in the run for another tool or other arguments: 409 ``call_id_conflict``, nothing
        written (in a batch with other calls, only that call fails, as a call of its own).
        """
        caller.require("submitter")
        payload = parse_body(await request.body(), client.settings)
        named = _tenant_named(payload, tenant)
        calls_tenant = caller.tenant_for(named)
        batch = await run_in_threadpool(
            lambda: client.submit(
                payload,
                Submission(
                    run_id=run_id,
                    principal=caller.name,
                    tenant=calls_tenant,
                    behavior=behavior,
                    idempotency_key=idempotency_key,
                    admin=caller.has("admin"),
                ),
            )
        )
        return {
            "run_id": batch.run_id,
            "tenant": calls_tenant,
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

    @router.get("/runs/{run_id}/calls", response_model=list[CallResult])
    def run_calls(
        run_id: str,
        request: Request,
        caller: Caller,
        limit: Limit = DEFAULT,
        cursor: PageCursor = None,
    ) -> Any:
        """Current state of a run's calls in dispatch order, a page at a time.

        The body is a list; ``X-Next-Cursor`` and ``Link`` lead to the next page,
        ``X-Total-Count`` is how many calls the run has.
        """
        caller.require_viewer()
        run_of_tenant(run_id, caller)
        page = client.calls_page(run_id, limit=limit, cursor=cursor)
        return paged(request, page, [_call_json(r) for r in page.items])

    @router.get("/runs", response_model=list[RunSummary])
    def runs(
        request: Request,
        caller: Caller,
        tenant: str | None = None,
        limit: Limit = DEFAULT,
        cursor: PageCursor = None,
        since: TimeBound = None,
        until: TimeBound = None,
    ) -> Any:
        """Runs, most recently dispatched into first, each with its calls by status.

        Filters: tenant (a tenant-bound caller's own only) and when the run was last
        dispatched into (``since``/``until``). Paged as ``GET /v1/approvals``; runs stay
        listed until their keys expire (``TOOLQ_RESULT_TTL`` after their last dispatch).
        """
        caller.require_viewer()
        start, end = time_bounds(since, until)
        page = client.runs(
            limit=limit,
            cursor=cursor,
            tenant=own_tenant(caller, tenant),
            since=start,
            until=end,
        )
        return paged(request, page, [s.model_dump(mode="json") for s in page.items])

    @router.get("/runs/{run_id}", response_model=RunSummary)
    def run(run_id: str, caller: Caller) -> Any:
        """One run: its owner, tenant, last dispatch and calls by status."""
        caller.require_viewer()
        run_of_tenant(run_id, caller)
        return client.run(run_id)

    @router.post("/calls/{call_id}/retry", status_code=202)
    def retry(call_id: str, caller: Caller) -> dict[str, Any]:
        """Retry a failed, denied, expired or cancelled call: a new call, dispatched anew.

        Same tool, arguments and run; approval rules apply again. The new call's
        ``retry_of`` names this one, whose ``retried_by`` names it. Run owner (or admin)
        only; 409 ``not_retryable`` for a call that is not final, succeeded, or was
        retried already, or while another principal's retry of it is being dispatched
        (its claim holds 60 s: the owner and an admin never both retry one call).
        """
        caller.require("submitter")
        call_of_tenant(call_id, caller, "retry calls of")
        result = client.retry(call_id, principal=caller.name, admin=caller.has("admin"))
        return _call_json(result)

    @router.post("/runs/{run_id}/approvals/approve", openapi_extra=decision_body_schema(ApproveRun))
    async def approve_run(run_id: str, caller: Caller, request: Request) -> dict[str, Any]:
        """Approve the listed calls of the run, each as its arguments were shown.

        The body lists the calls the approver reviewed (``GET /v1/approvals?run_id=``),
        each with its ``digest``: ``{"calls": [{"call_id": ..., "digest": ...}]}``. Each is
        approved as by ``POST /v1/approvals/{call_id}/approve`` with that digest (signed,
        audited, counted toward its quorum); a call parked in the run after that listing
        stays parked, and one whose tool or arguments changed since is refused
        (``digest_mismatch``). Calls of a risk the caller is no approver of, and the
        caller's own calls, stay parked too; every refusal is listed under ``refused``.
        403 when the caller may approve none of the listed calls.
        """
        await run_in_threadpool(_may_decide_run, run_id, caller)  # 401/403/404 first
        body = parse_decision(await request.body(), client.settings, ApproveRun)
        if body is None:
            raise reviewed_required(
                "calls",
                'list the calls you reviewed, each with its digest: {"calls": [{"call_id": '
                '..., "digest": ...}]} (GET /v1/approvals?run_id= lists them)',
            )
        return await run_in_threadpool(_approve_run, run_id, caller, body)

    def _may_decide_run(run_id: str, caller: Principal) -> None:
        if not any(caller.has(f"approver:{level.value}") for level in RiskLevel):
            raise ForbiddenError(f"{caller.name!r} is no approver (needs an approver:<risk> role)")
        run_of_tenant(run_id, caller, "decide calls of")

    def _approve_run(run_id: str, caller: Principal, body: ApproveRun) -> dict[str, Any]:
        def may(request: ApprovalRequest) -> ToolqError | None:
            try:
                caller.require_approver(decided_risk(client.registry, request.name))
            except ForbiddenError as exc:
                return exc
            return None

        shown = {c.call_id: c.digest for c in body.calls}
        outcomes = client.approvals.approve_run(run_id, caller.name, shown, may=may)
        approved = [_call_json(o) for o in outcomes.values() if isinstance(o, CallResult)]
        refused = [
            {"call_id": call_id, "code": o.code, "message": o.message}
            for call_id, o in outcomes.items()
            if isinstance(o, ToolqError)
        ]
        kept_out = (ForbiddenError, NotAuthorizedError)
        if refused and not approved and all(isinstance(o, kept_out) for o in outcomes.values()):
            raise NotAuthorizedError(
                f"{caller.name!r} may approve none of the {len(refused)} listed call(s) of run "
                f"{run_id}: {refused[0]['message']}",
                run_id=run_id,
                by=caller.name,
            )
        return {"run_id": run_id, "approved": approved, "refused": refused}

    @router.get("/calls/{call_id}")
    def get_call(call_id: str, caller: Caller) -> dict[str, Any]:
        """One call's state and, once final, its outcome."""
        caller.require_viewer()
        call_of_tenant(call_id, caller)
        return _call_json(client.result(call_id))

    @router.get("/runs/{run_id}/messages")
    def messages(run_id: str, caller: Caller, format: str | None = None) -> list[dict[str, Any]]:
        """The run's results as the provider's tool-result messages."""
        caller.require_viewer()
        run_of_tenant(run_id, caller)
        return client.to_messages(run_id, ProviderFormat.parse(format) if format else None)

    @router.post("/runs/{run_id}/events/ticket")
    def event_ticket(run_id: str, caller: Caller) -> dict[str, Any]:
        """A short-lived ticket that opens this run's event stream (``?ticket=``), read-only."""
        caller.require_viewer()
        run_of_tenant(run_id, caller)
        return {
            "ticket": parts.tickets_for(run_id).issue(run_id, caller),
            "run_id": run_id,
            "expires_in": parts.ttl,
        }

    @router.get("/runs/{run_id}/events", response_model=None)
    async def events(
        run_id: str,
        request: Request,
        caller: Reader,
        follow: bool = True,
        after: str | None = None,
        last_event_id: Annotated[str | None, Header()] = None,
    ) -> Any:
        """Server-Sent Events (id = stream id; resumes after ``Last-Event-ID``), or JSON.

        Authenticated by the ``Authorization`` header or by ``?ticket=`` (see
        ``POST /v1/runs/{run_id}/events/ticket``); 503 with ``Retry-After`` when this
        process serves ``max_event_streams`` streams already.
        """
        caller.require_viewer()
        await run_in_threadpool(run_of_tenant, run_id, caller)
        start = last_event_id or after
        if start is not None:
            check_stream_id(start)
        if not follow:
            backlog = await run_in_threadpool(lambda: list(client.events(run_id, start)))
            if backlog:  # the run may have been created since the check
                await run_in_threadpool(run_of_tenant, run_id, caller)
            return [e.model_dump(mode="json") for e in backlog]
        parts.check_capacity()
        # Finding a run's cell may ask Redis: off the event loop.
        hub = await run_in_threadpool(parts.hub_for, run_id)
        # A stream may be opened before its run exists; the run's first event is written
        # with its owner, so a bound caller's tenant is checked again before the first frame.
        verify = None if caller.tenant is None else (lambda: run_of_tenant(run_id, caller))
        return StreamingResponse(
            _sse(hub, frames, run_id, start, request, verify),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    @router.get("/approvals", response_model=list[ApprovalRequest])
    def pending(
        request: Request,
        caller: Caller,
        run_id: str | None = None,
        risk: str | None = None,
        tool: str | None = None,
        tenant: str | None = None,
        limit: Limit = DEFAULT,
        cursor: PageCursor = None,
        since: TimeBound = None,
        until: TimeBound = None,
    ) -> Any:
        """Calls awaiting a decision, oldest parked first, a page at a time.

        Filters: run, risk, tool, tenant (a tenant-bound caller's own only), and when they
        were parked (``since``/``until``). The body is a list; ``X-Next-Cursor`` and
        ``Link`` lead to the next page, ``X-Total-Count`` counts every match (not sent
        with a ``risk`` or ``tool`` filter). With cells, those of every cell that answers;
        ``X-Toolq-Cells-Down`` lists the cells that do not (comma-separated indexes).
        """
        caller.require_viewer()
        tenant = own_tenant(caller, tenant)
        start, end = time_bounds(since, until)
        down = [] if run_id is not None else client.reachable()[1]
        page = client.approvals.page(
            limit=limit,
            cursor=cursor,
            since=start,
            until=end,
            run_id=run_id,
            risk=risk,
            tool=tool,
            tenant=tenant,
        )
        headers = {"X-Toolq-Cells-Down": ",".join(str(c.index) for c in down)} if down else {}
        return paged(request, page, [r.model_dump(mode="json") for r in page.items], headers)

    @router.get("/approvals/{call_id}")
    def approval(call_id: str, caller: Caller) -> ApprovalRequest:
        """A call as approvers see it: arguments, digest, preview, diff."""
        caller.require_viewer()
        call_of_tenant(call_id, caller)
        return client.approvals.get(call_id)

    @router.post(
        "/approvals/{call_id}/approve",
        openapi_extra=decision_body_schema(Approve, required=("digest",)),
    )
    async def approve(call_id: str, caller: Caller, request: Request) -> dict[str, Any]:
        """Approve the call as you reviewed it: with its ``digest`` (optionally an edit).

        ``digest`` is the one ``GET /v1/approvals/{call_id}`` returned, also with edited
        ``arguments`` (the digest of what was shown before the edit): a call whose tool or
        arguments changed since is refused (409 ``digest_mismatch``), and a body without it
        is a 422, nothing written.
        """
        await run_in_threadpool(_may_decide, call_id, caller)  # 401/403/404 before the body
        body = parse_decision(await request.body(), client.settings, Approve)
        if body is None or body.digest is None:
            # Signing whatever is parked when the request arrives would sign a call a Redis
            # writer rewrote after the approver's view. Audited: an approver's client that
            # approves without showing the call is worth an operator's look.
            await run_in_threadpool(
                client.approvals.refused, call_id, caller.name, REFUSED_NOT_REVIEWED
            )
            raise digest_required(call_id)
        return await run_in_threadpool(_approve, call_id, caller, body)

    def _may_decide(call_id: str, caller: Principal) -> None:
        may_decide(client, call_id, caller)

    def _approve(call_id: str, caller: Principal, body: Approve) -> dict[str, Any]:
        result = client.approvals.approve(
            call_id,
            caller.name,
            arguments=body.arguments,
            note=body.note,
            digest=body.digest,
            always=body.always,
        )
        return _call_json(result)

    @router.post("/approvals/{call_id}/deny", openapi_extra=decision_body_schema(Deny))
    async def deny(call_id: str, caller: Caller, request: Request) -> dict[str, Any]:
        """Deny with a reason the model will read."""
        await run_in_threadpool(_may_decide, call_id, caller)  # 401/403/404 before the body
        body = parse_decision(await request.body(), client.settings, Deny)
        return await run_in_threadpool(_deny, call_id, caller, body)

    def _deny(call_id: str, caller: Principal, body: Deny | None) -> dict[str, Any]:
        decision = body or Deny()
        result = client.approvals.deny(
            call_id, caller.name, decision.reason, always=decision.always
        )
        return _call_json(result)

    @router.post("/calls/{call_id}/cancel")
    def cancel(call_id: str, caller: Caller) -> dict[str, Any]:
        """Cancel: at once when queued or parked, cooperatively when running (run owner only)."""
        caller.require("submitter")
        call_of_tenant(call_id, caller, "cancel calls of")
        return _call_json(client.cancel(call_id, principal=caller.name, admin=caller.has("admin")))

    @router.get("/calls/{call_id}/undo")
    def undo_data(call_id: str, caller: Caller) -> UndoData:
        """What undoing the call would pass to its undo handler, and its ``undo_digest``.

        Asked by whoever may undo the call (as ``POST``): the undo data is what the call
        overwrote, kept apart from its result.
        """
        call_of_tenant(call_id, caller, "undo calls of")
        gate = client.undo_gate(call_id)
        if gate is not None:
            caller.require_approver(gate)
            return client.undo_data(call_id, approved_by=caller.name)
        caller.require("submitter")
        return client.undo_data(call_id, principal=caller.name, admin=caller.has("admin"))

    @router.post("/calls/{call_id}/undo", openapi_extra=decision_body_schema(UndoRequest))
    async def undo(
        call_id: str, caller: Caller, request: Request, timeout: float = Query(30, gt=0, le=300)
    ) -> Any:
        """Run the call's undo handler on a worker; the ``call.undone`` event.

        The undo of a gated tool is an approver's decision: an approver of the call's risk
        (not its submitter) reviews its undo data (``GET``) and sends back its
        ``undo_digest``; the API signs the approval for that data only (changed since:
        409 ``digest_mismatch``). A DANGEROUS tool's undo needs as many distinct approvers
        as its calls (``TOOLQ_DANGEROUS_APPROVALS``): until the last has asked, 202
        ``awaiting_approvals`` with the approvers so far, nothing requested. Any other undo:
        the run's owner (or an admin), the digest optional.
        """
        gate = await run_in_threadpool(_may_undo, call_id, caller)  # 401/403/404 first
        body = parse_decision(await request.body(), client.settings, UndoRequest)
        shown = body.undo_digest if body is not None else None
        return await run_in_threadpool(_undo, call_id, caller, gate, shown, timeout)

    def _may_undo(call_id: str, caller: Principal) -> RiskLevel | None:
        call_of_tenant(call_id, caller, "undo calls of")
        gate = client.undo_gate(call_id)
        if gate is not None:
            caller.require_approver(gate)
        else:
            caller.require("submitter")
        return gate

    def _undo(
        call_id: str, caller: Principal, gate: RiskLevel | None, shown: str | None, timeout: float
    ) -> Any:
        if gate is not None:
            if shown is None:
                raise reviewed_required(
                    "undo_digest",
                    f"the undo of call {call_id} is an approver's decision: review its undo "
                    f"data (GET /v1/calls/{call_id}/undo) and send back its undo_digest: "
                    '{"undo_digest": "..."}',
                )
            try:
                event = client.undo(
                    call_id,
                    timeout=timeout,
                    principal=caller.name,
                    approved_by=caller.name,
                    shown=shown,
                )
            except UndoAwaitingApprovalsError as exc:  # a quorum: not requested yet
                return JSONResponse(
                    {"call_id": call_id, "status": "awaiting_approvals", **exc.to_dict()},
                    status_code=202,
                )
        else:
            admin = caller.has("admin")
            event = client.undo(
                call_id, timeout=timeout, principal=caller.name, admin=admin, shown=shown
            )
        return JSONResponse(event.model_dump(mode="json"))

    return router


def own_tenant(caller: Principal, named: str | None) -> str | None:
    """The tenant a listing is limited to: a bound caller's own (naming another: 403)."""
    if caller.tenant is None:
        return named
    if named is not None and named != caller.tenant:
        raise WrongTenantError(
            f"{caller.name!r} is bound to tenant {caller.tenant!r}, not {named!r}",
            by=caller.name,
        )
    return caller.tenant


def _tenant_named(payload: Any, query: str | None) -> str | None:
    """The tenant named by ``?tenant=`` or the body's ``"tenant"`` (taken out; both agree)."""
    body = payload.pop("tenant", None) if isinstance(payload, dict) else None
    if body is not None and not isinstance(body, str):
        raise PayloadError('"tenant" must be a string')
    if body is not None and query is not None and body != query:
        raise PayloadError(f"the body names tenant {body!r} and the query {query!r}")
    return body if body is not None else query


def sse_frame(event: Event) -> str:
    """One Server-Sent Event."""
    data = json.dumps(event.model_dump(mode="json"), separators=(",", ":"))
    return f"id: {event.id}\nevent: {event.type.value}\ndata: {data}\n\n"


class FrameCache:
    """``sse_frame`` rendered once per event, however many streams of its run are open."""

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self._frames: OrderedDict[tuple[str, str], str] = OrderedDict()

    def __call__(self, event: Event) -> str:
        """The frame of ``event`` (stream entries never change, so ids are safe keys)."""
        key = (event.run_id, event.id)
        frame = self._frames.get(key)
        if frame is None:
            frame = self._frames[key] = sse_frame(event)
            if len(self._frames) > self.size:
                self._frames.popitem(last=False)
        return frame


async def _sse(
    hub: EventHub,
    frame: FrameCache,
    run_id: str,
    after: str | None,
    request: Request,
    verify: Callable[[], None] | None = None,
) -> AsyncIterator[str]:
    """The run's events after ``after``, then live ones, until the client leaves or we stop.

    On shutdown (``EventHub.draining``) the stream ends within about a second; the client
    resumes with ``Last-Event-ID``. ``verify`` (raising ``NotRunOwnerError``) is called
    once before the first event is sent; a refusal ends the stream without it.
    """
    listener, pending = await hub.join(run_id, after)
    last = stream_id_key(after) if after else None
    idle = 0.0
    try:
        yield "retry: 1000\n\n"  # also tells the client it is registered: nothing is missed now
        while True:
            frames: list[str] = []
            for event in pending:
                key = stream_id_key(event.id)
                if last is None or key > last:  # the backlog and the hub may overlap
                    last = key
                    frames.append(frame(event))
            if frames and verify is not None:
                try:
                    await run_in_threadpool(verify)
                except NotRunOwnerError:
                    return
                verify = None
            if frames:
                yield "".join(frames)
            if listener.lagged:
                # The queue overflowed: clear the flag first, so the hub queues what
                # follows, then re-read the stream for what did not fit.
                listener.lagged = False
                pending = await hub.read(run_id, "{}-{}".format(*last) if last else None)
                continue
            if hub.draining:
                return
            pending = await _next(listener)
            if pending:
                idle = 0.0
                continue
            if hub.draining or await request.is_disconnected():
                return
            idle += DISCONNECT_CHECK_SECONDS
            if idle >= HEARTBEAT_SECONDS:
                idle = 0.0
                yield ": keep-alive\n\n"
    finally:
        hub.leave(listener)


async def _next(listener: Listener) -> list[Event]:
    """What the hub queued for ``listener``, waiting up to ``DISCONNECT_CHECK_SECONDS``."""
    try:
        first = await asyncio.wait_for(listener.queue.get(), DISCONNECT_CHECK_SECONDS)
    except TimeoutError:
        return []
    out = [first]
    while not listener.queue.empty():
        out.append(listener.queue.get_nowait())
    return out
