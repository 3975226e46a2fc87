"""Decision-token routes: an approver asks for one; its holder makes that one decision.

``POST /v1/approvals/{call_id}/decision-token`` (an approver of the call's risk, of its
tenant) issues a token (``toolq.api.decision_tokens``). ``GET /v1/decisions/{call_id}``
shows the call, and ``POST /v1/decisions/{call_id}/approve`` or ``/deny`` decides it, with
the token as the bearer: the decision is recorded as the approver who asked for the token.
"""

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from starlette.concurrency import run_in_threadpool

from toolq.api.auth import AuthenticationError, Principal
from toolq.api.decision_tokens import DecisionGrant, DecisionTokens
from toolq.api.limits import decision_body_schema, digest_required, parse_decision
from toolq.approvals.authority import decided_risk
from toolq.approvals.models import ApprovalRequest, Approve, Deny, TokenRequest
from toolq.approvals.store import changed_since_shown
from toolq.dispatch.approval_client import DECISION_TOKEN_PREFIX
from toolq.dispatch.client import Client
from toolq.errors import (
    DigestMismatchError,
    NotAuthorizedError,
    NotAwaitingApprovalError,
    ReplicationError,
    ToolqError,
)
from toolq.models import REFUSED_TOKEN_ALWAYS, REFUSED_TOKEN_EDIT, CallResult, CallStatus


def build_decisions_router(client: Client, auth: Any, tokens: DecisionTokens) -> APIRouter:
    """The decision-token routes over one ``Client``."""
    router = APIRouter(prefix="/v1")
    Caller = Annotated[Principal, Depends(auth)]

    def holder(call_id: str, request: Request) -> DecisionGrant:
        header = request.headers.get("authorization", "")
        scheme, _, value = header.partition(" ")
        token = value.strip() if scheme.lower() == "bearer" else ""
        if not token.startswith(DECISION_TOKEN_PREFIX):
            raise AuthenticationError(
                "missing decision token (Authorization: Bearer tqd_...); ask for one with "
                "POST /v1/approvals/{call_id}/decision-token"
            )
        return tokens.read(token, call_id)

    Holder = Annotated[DecisionGrant, Depends(holder)]

    @router.post(
        "/approvals/{call_id}/decision-token",
        openapi_extra=decision_body_schema(TokenRequest, ("digest",)),
    )
    async def issue(call_id: str, caller: Caller, request: Request) -> dict[str, Any]:
        """A one-time token for the caller's own decision on this call, to give to an app.

        Needs the approver role of the call's risk, and the ``digest`` of the call as the
        caller reviewed it (``GET /v1/approvals/{id}``): the token decides this call once,
        as the caller, and only while its tool and arguments are the ones reviewed.
        """
        shown = await run_in_threadpool(_may_decide, call_id, caller)  # 401/403/404 first
        body = parse_decision(await request.body(), client.settings, TokenRequest)
        if body is None or body.digest is None:
            raise digest_required(call_id, token=True)
        return await run_in_threadpool(_issue, call_id, caller, shown, body.digest)

    def _issue(
        call_id: str, caller: Principal, request: ApprovalRequest, reviewed: str
    ) -> dict[str, Any]:
        if reviewed != request.digest:
            raise changed_since_shown(call_id, request.digest)
        if request.status is not CallStatus.AWAITING_APPROVAL:
            raise NotAwaitingApprovalError(
                f"call {call_id} is {request.status.value}, not awaiting approval",
                call_id=call_id,
                status=request.status.value,
            )
        return {
            "token": tokens.issue(call_id, request.digest, caller),
            "call_id": call_id,
            "digest": request.digest,
            "approver": caller.name,
            "expires_in": tokens.ttl,
        }

    def _may_decide(call_id: str, caller: Principal) -> ApprovalRequest:
        cell = client.cell_for_call(call_id)
        cell.owners.check_call_tenant(
            call_id, caller.tenant, principal=caller.name, action="decide calls of"
        )
        request = client.approvals.get(call_id)
        # The registry's risk: a Redis writer could lower the record's.
        risk = decided_risk(client.registry, request.name)
        caller.require_approver(risk)
        reason = cell.policy.refusal(risk, request.submitter, caller.name)
        if reason is not None:
            raise NotAuthorizedError(
                f"{caller.name!r} may not decide call {call_id}: {reason.replace('_', ' ')}",
                call_id=call_id,
                by=caller.name,
            )
        return request

    @router.get("/decisions/{call_id}")
    def shown(call_id: str, grant: Holder) -> ApprovalRequest:
        """The call a decision token is for, as approvers see it."""
        return client.approvals.get(grant.call_id)

    @router.post("/decisions/{call_id}/approve", openapi_extra=decision_body_schema(Approve))
    async def approve(call_id: str, grant: Holder, request: Request) -> dict[str, Any]:
        """Approve as the token's approver, exactly the call it was issued for; once."""
        body = parse_decision(await request.body(), client.settings, Approve) or Approve()
        await _refuse(grant, _always_refusal(body.always, call_id, "approve"), REFUSED_TOKEN_ALWAYS)
        edit = _edit_refusal(body.arguments, call_id, grant.digest)
        await _refuse(grant, edit, REFUSED_TOKEN_EDIT)
        if body.digest is not None and body.digest != grant.digest:
            raise DigestMismatchError(
                f"call {call_id}: the token was issued for digest {grant.digest}",
                call_id=call_id,
                digest=grant.digest,
            )
        return await run_in_threadpool(
            _spend,
            grant,
            lambda: client.approvals.approve(
                call_id,
                grant.approver,
                note=body.note,
                digest=grant.digest,
            ),
        )

    @router.post("/decisions/{call_id}/deny", openapi_extra=decision_body_schema(Deny))
    async def deny(call_id: str, grant: Holder, request: Request) -> dict[str, Any]:
        """Deny as the token's approver, with a reason the model will read; once."""
        body = parse_decision(await request.body(), client.settings, Deny) or Deny()
        await _refuse(grant, _always_refusal(body.always, call_id, "deny"), REFUSED_TOKEN_ALWAYS)

        def decide() -> CallResult:
            # Denying changes the arguments of nothing; still, only what the token was for.
            current = client.approvals.get(call_id)
            if current.digest != grant.digest:
                raise DigestMismatchError(
                    f"call {call_id}: the call (its tool or arguments) changed since the "
                    "token was issued; review the call again",
                    call_id=call_id,
                    digest=current.digest,
                )
            return client.approvals.deny(call_id, grant.approver, body.reason)

        return await run_in_threadpool(_spend, grant, decide)

    async def _refuse(grant: DecisionGrant, refusal: NotAuthorizedError | None, why: str) -> None:
        """Raise ``refusal``, if any, audited as the token's approver's (nothing spent)."""
        if refusal is not None:
            await run_in_threadpool(client.approvals.refused, grant.call_id, grant.approver, why)
            raise refusal

    def _spend(grant: DecisionGrant, decide: Any) -> dict[str, Any]:
        """Spend the token, then decide; a decision that did not happen gives it back."""
        cell = client.cell_for_call(grant.call_id)
        tokens.spend(grant, cell.redis, cell.keys)
        try:
            result: CallResult = decide()
        except ReplicationError:
            raise  # the decision was made; too few replicas confirmed it
        except ToolqError:
            tokens.refund(grant, cell.redis, cell.keys)
            raise
        return result.model_dump(mode="json", exclude_none=True)

    return router


def _edit_refusal(
    arguments: dict[str, Any] | None, call_id: str, digest: str
) -> NotAuthorizedError | None:
    """A decision token approves the call as its approver was shown it: never an edit.

    Its holder (an app's screen, a link) is not the approver: arguments it chose would run
    as approved by a person who never saw them. An edit is the approver's own decision,
    made with their own token (or the dashboard).
    """
    if arguments is None:
        return None
    return NotAuthorizedError(
        f"a decision token approves call {call_id} exactly as it was shown when the token "
        f"was issued (digest {digest}): it cannot approve an edit; the approver edits "
        "with their own token",
        call_id=call_id,
    )


def _always_refusal(always: bool, call_id: str, verb: str) -> NotAuthorizedError | None:
    """A decision token decides one call: never the tool for the rest of the run."""
    if not always:
        return None
    return NotAuthorizedError(
        f"a decision token decides one call: it cannot {verb} the tool for the rest of "
        "the run (always)",
        call_id=call_id,
    )
