"""Calls of unknown outcome: a person's resolution, and a worker's check before a re-run.

A call whose worker died mid-call, of a tool not marked idempotent, may have had its side
effect or not (``CallStatus.UNKNOWN``, ``recover.lua``). It is parked until an approver
resolves it: ``succeeded`` (it took effect; an optional result text), ``failed`` (it did
not; the note is the error the model reads) or ``rerun`` (run it again, a new attempt).

A resolution is decided like an approval: the approver must be allowed to decide the tool's
risk (``TOOLQ_APPROVERS``, no self-approval), it is one compare-and-set (``resolve.lua``),
signed by the deciding process's key over the call's facts (``call_facts``), the outcome and
the lost attempt, and audited. A worker runs a started-before call of a non-idempotent tool
only with a ``rerun`` resolution for the attempt before this one, signed by a verify key
(``rerun_refusal``): a resolution written straight into Redis does not run it.
"""

from __future__ import annotations

import json
import time
from typing import Any

from toolq.approvals.store import ApprovalStore
from toolq.errors import CallNotFoundError, NotAwaitingApprovalError, WorkerLostError
from toolq.models import (
    FINAL_EVENT_OF,
    AuditOutcome,
    CallEnvelope,
    CallResult,
    CallStatus,
    Resolution,
    RiskLevel,
)
from toolq.results import scripts
from toolq.results.store import dumps
from toolq.signing import Verifier, call_facts

AUDITED = {
    Resolution.SUCCEEDED: AuditOutcome.RESOLVED_SUCCEEDED,
    Resolution.FAILED: AuditOutcome.RESOLVED_FAILED,
    Resolution.RERUN: AuditOutcome.RESOLVED_RERUN,
}
"""The audit outcome of each resolution."""

RESOLVE_ATTEMPTS = 5
"""Re-reads of a call that was started again while it was being resolved before giving up."""


def final_result(outcome: Resolution, by: str, note: str | None, result: str | None) -> Any:
    """The stored result (``CallResult`` fields) of a ``succeeded`` or ``failed`` resolution."""
    said = f": {note}" if note else ""
    if outcome is Resolution.SUCCEEDED:
        text = result if result is not None else (note or "")
        return {
            "output": text
            or f"the tool call took effect (checked by {by} after its worker was lost)"
        }
    return {
        "error": f"the tool call did not take effect (checked by {by} after its worker was "
        f"lost){said}",
        "error_type": WorkerLostError.code,
    }


def resolve(
    approvals: ApprovalStore,
    call_id: str,
    by: str,
    outcome: Resolution | str,
    *,
    note: str | None = None,
    result: str | None = None,
) -> CallResult:
    """Resolve a call of unknown outcome as ``by`` (see the module docstring)."""
    chosen = Resolution(outcome)
    if result is not None and chosen is not Resolution.SUCCEEDED:
        raise ValueError("a result text goes only with the outcome 'succeeded'")
    store = approvals.store
    for _ in range(RESOLVE_ATTEMPTS):
        parked = approvals._read(call_id)
        request = approvals._authorize(parked, by)
        status = parked.record.get("status", "")
        if status != CallStatus.UNKNOWN.value:
            approvals._audit(request, by, AuditOutcome.refused(status))
            raise NotAwaitingApprovalError(
                f"call {call_id} is {status}, not of unknown outcome: there is nothing to resolve",
                call_id=call_id,
                status=status,
            )
        attempt = int(parked.record.get("attempt") or 0)
        now = time.time()
        ts = repr(now)
        fields: dict[str, Any] = {
            **parked.facts,
            "outcome": chosen.value,
            "attempt": attempt,
            "by": by,
            "note": note or "",
            "ts": ts,
        }
        if approvals.signer is not None:
            signed = approvals.signer.sign("resolution", **fields)
        else:
            signed = {"payload": {**fields, "kind": "resolution"}}
        status_after = CallStatus.QUEUED if chosen is Resolution.RERUN else CallStatus(chosen.value)
        data: dict[str, Any] = {
            "status": status_after.value,
            "resolution": chosen.value,
            "resolved_by": by,
            "attempt": attempt,
            "decided_at": now,
        }
        if note:
            data["note"] = note
        if chosen is Resolution.RERUN:
            data["reason"] = f"re-run by {by} after its worker was lost"
        stored = "" if chosen is Resolution.RERUN else dumps(final_result(chosen, by, note, result))
        env = parked.envelope
        reply = store.scripts.run(
            scripts.RESOLVE(
                keys=store.keys,
                call_id=call_id,
                run_id=env.run_id,
                outcome=chosen.value,
                by=by,
                now=ts,
                maxlen=approvals.settings.stream_maxlen,
                ttl=approvals.settings.result_ttl,
                result=stored,
                resolution=dumps(signed),
                data=dumps(data),
                attempt=attempt,
                etype="" if chosen is Resolution.RERUN else FINAL_EVENT_OF[status_after].value,
            )
        )
        if reply.outcome == "retry":
            continue
        if reply.outcome == "missing":
            raise CallNotFoundError(f"unknown call id {call_id!r}", call_id=call_id)
        if reply.outcome == "conflict":
            approvals._audit(request, by, AuditOutcome.refused(reply.value))
            raise NotAwaitingApprovalError(
                f"call {call_id} is {reply.value}, not of unknown outcome: there is nothing "
                "to resolve",
                call_id=call_id,
                status=reply.value,
            )
        approvals._audit(request, by, AUDITED[chosen])
        return store.result(call_id)
    raise NotAwaitingApprovalError(
        f"call {call_id} kept changing while it was being resolved; try again",
        call_id=call_id,
        status=CallStatus.UNKNOWN.value,
    )


def rerun_refusal(
    envelope: CallEnvelope,
    risk: RiskLevel,
    digest: str,
    attempt: int,
    resolution: Any,
    verifier: Verifier | None,
) -> str | None:
    """Why a worker must not run ``attempt`` of a non-idempotent call, or None when it may.

    A first attempt always may. A later one (the call was started before and lost) needs a
    ``rerun`` resolution for the attempt before it, over this call's facts (``digest``: of
    its arguments as stored; ``risk``: the worker's own registry's); with ``verifier``, one
    signed by a verify key. Without verify keys the worker checks what it can: the stored
    resolution names ``rerun`` and this attempt.
    """
    if attempt <= 1:
        return None
    if not resolution:
        return "the call was started before and carries no re-run resolution"
    if verifier is not None:
        payload = verifier.payload(resolution, "resolution")
        if payload is None:
            return "the re-run resolution's signature is invalid or not made by a trusted key"
    else:
        try:
            loaded = json.loads(resolution)
        except (TypeError, ValueError):
            return "the re-run resolution is not readable"
        payload = loaded.get("payload") if isinstance(loaded, dict) else None
        if not isinstance(payload, dict):
            return "the re-run resolution is not readable"
    for fact, value in call_facts(envelope, risk, digest).items():
        if payload.get(fact) != value:
            return f"the re-run resolution does not match this call's {fact}"
    if payload.get("outcome") != Resolution.RERUN.value:
        return "the call's resolution is not a re-run"
    if payload.get("attempt") != attempt - 1:
        return f"the re-run resolution was made for attempt {payload.get('attempt')}, not this one"
    return None
