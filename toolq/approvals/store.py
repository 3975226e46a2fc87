"""``ApprovalStore``: parked calls in Redis, decided by one compare-and-set each.

Only a call still ``awaiting_approval`` and before its deadline can be decided; of any
number of racing approvers exactly one wins and enqueues. Every decision, refusal and
expiry is appended to the audit stream.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from toolq.approvals.models import ApprovalRequest, AuditEntry
from toolq.approvals.policy import ApprovalMode, ApprovalPolicy, RunRules, digest_arguments
from toolq.errors import (
    ApprovalExpiredError,
    CallNotFoundError,
    DigestMismatchError,
    InvalidArgumentsError,
    NotAuthorizedError,
    NotAwaitingApprovalError,
    ToolqError,
)
from toolq.models import CallEnvelope, CallResult, CallStatus, RiskLevel
from toolq.registry.secrets import SecretPaths, mask_arguments
from toolq.results import scripts
from toolq.results.owners import RunOwners
from toolq.results.store import CallStore, dumps
from toolq.secretbox import SecretBox, merge_edit, open_arguments

if TYPE_CHECKING:
    from toolq.registry.registry import ToolRegistry
    from toolq.workers.app import Publisher

EXPIRED_RESULT = {
    "error": "approval expired: nobody approved this call before its deadline, so it did not run",
    "error_type": "approval_expired",
}


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def to_request(record: dict[str, str], paths: SecretPaths | None = None) -> ApprovalRequest:
    """What approvers see of a call record, in any state: every secret masked.

    ``paths`` are the tool's secret locations; without them, sealed values are still masked.
    """
    envelope = CallEnvelope.model_validate_json(record["envelope"])
    original = envelope.original_arguments
    return ApprovalRequest(
        call_id=envelope.call_id,
        run_id=envelope.run_id,
        tool_call_id=envelope.tool_call_id,
        name=envelope.name,
        risk=envelope.risk,
        status=CallStatus(record["status"]),
        arguments=mask_arguments(envelope.arguments, paths),
        original_arguments=mask_arguments(original, paths) if original is not None else None,
        digest=record.get("digest", ""),
        submitter=envelope.principal,
        created_at=float(record.get("created_at") or envelope.created_at),
        deadline=float(record["deadline"]) if record.get("deadline") else None,
        approval_metadata=json.loads(record["approval_metadata"])
        if record.get("approval_metadata")
        else None,
        preview=json.loads(record["preview"]) if record.get("preview") else None,
        preview_error=record.get("preview_error") or None,
        diff=json.loads(record["diff"]) if record.get("diff") else None,
        approvals=json.loads(record["approvers"]) if record.get("approvers") else [],
        decided_by=record.get("decided_by") or None,
    )


class ApprovalStore:
    """Lists, approves, denies and expires calls that are ``awaiting_approval``."""

    def __init__(
        self,
        store: CallStore,
        publisher: Publisher,
        registry: ToolRegistry,
        policy: ApprovalPolicy,
    ) -> None:
        self.store = store
        self.publisher = publisher
        self.registry = registry
        self.policy = policy
        self.settings = store.settings
        self.keys = store.keys
        self.redis = store.redis
        self.box = SecretBox.from_settings(self.settings)
        self._decide = self.redis.register_script(scripts.DECIDE)
        self._expire = self.redis.register_script(scripts.EXPIRE)
        self.owners = RunOwners(self.redis, self.keys, self.settings)

    # -- reading -----------------------------------------------------------------------------

    def pending(
        self,
        run_id: str | None = None,
        risk: RiskLevel | str | None = None,
        tool: str | None = None,
    ) -> list[ApprovalRequest]:
        """Calls awaiting a decision, soonest deadline first, optionally filtered."""
        raw: Any = self.redis.zrange(self.keys.pending_approvals, 0, -1)
        ids = [_text(c) for c in raw]
        level = RiskLevel.parse(risk) if risk is not None else None
        out = []
        for record in self.store.records(ids):
            if record is None or record["status"] != CallStatus.AWAITING_APPROVAL.value:
                continue
            if run_id is not None and record["run_id"] != run_id:
                continue
            if level is not None and record["risk"] != level.value:
                continue
            if tool is not None and record["name"] != tool:
                continue
            out.append(self._request(record))
        return out

    def get(self, call_id: str) -> ApprovalRequest:
        """A call as approvers see it (any state)."""
        [record] = self.store.records([call_id])
        if record is None:
            raise CallNotFoundError(f"unknown call id {call_id!r}", call_id=call_id)
        return self._request(record)

    def _request(self, record: dict[str, str]) -> ApprovalRequest:
        tool = self.registry.get(record["name"])
        return to_request(record, tool.secret_paths if tool is not None else None)

    def audit(self, count: int = 100, after: str | None = None) -> list[AuditEntry]:
        """Audit entries, oldest first, after the stream id ``after``."""
        entries: Any = self.redis.xrange(
            self.keys.audit_stream, min=f"({after}" if after else "-", count=count
        )
        out = []
        for entry_id, fields in entries:
            f = {_text(k): _text(v) for k, v in fields.items()}
            out.append(AuditEntry(id=_text(entry_id), **{**f, "ts": float(f["ts"])}))
        return out

    # -- deciding ----------------------------------------------------------------------------

    def approve(
        self,
        call_id: str,
        by: str,
        *,
        arguments: dict[str, Any] | None = None,
        note: str | None = None,
        digest: str | None = None,
        always: bool = False,
    ) -> CallResult:
        """Approve a parked call (optionally with edited arguments) and enqueue it.

        ``digest`` names the arguments the approver saw; if they changed, the decision is
        refused. ``always`` also approves this tool for the rest of the run.
        """
        request = self._authorize(call_id, by)
        envelope = self.store.envelope(call_id)
        data: dict[str, Any] = {"status": CallStatus.QUEUED.value, "by": by, "decision": "approved"}
        if note:
            data["note"] = note
        new_envelope = ""
        if arguments is not None:
            tool = self.registry.require(envelope.name)
            stored = merge_edit(self.box, tool, call_id, arguments, envelope.arguments)
            try:
                # decrypted in memory only, to validate what will run
                tool.validate(open_arguments(self.box, tool, call_id, stored))
            except InvalidArgumentsError:
                self._audit(request, by, "refused:invalid_arguments")
                raise
            edited = envelope.model_copy(
                update={"arguments": stored, "original_arguments": envelope.arguments}
            )
            new_envelope = edited.model_dump_json()
            data["edited_arguments"] = tool.redact(stored)
        self._run_decide(request, "approve", by, data, None, new_envelope, digest)
        if always:
            self.policy.update_rules(
                envelope.run_id, lambda rules: rules.always_approve.append(envelope.name)
            )
        return self.store.result(call_id)

    def deny(self, call_id: str, by: str, reason: str = "", *, always: bool = False) -> CallResult:
        """Deny a parked call; the model reads ``reason``; ``always`` denies it for the run."""
        request = self._authorize(call_id, by)
        message = f"denied by {by}: {reason}" if reason else f"denied by {by}"
        result: dict[str, Any] = {"error": message, "error_type": "approval_denied"}
        data: dict[str, Any] = {
            "status": CallStatus.DENIED.value,
            "by": by,
            "decision": "denied",
            "reason": reason,
            "error": message,
        }
        self._run_decide(request, "deny", by, data, result, "", None)
        if always:
            self.policy.update_rules(
                request.run_id, lambda rules: rules.always_deny.append(request.name)
            )
        return self.store.result(call_id)

    def decide_run(
        self,
        run_id: str,
        by: str,
        *,
        approve: Sequence[str] = (),
        deny: Mapping[str, str] | None = None,
    ) -> dict[str, CallResult | ToolqError]:
        """Decide several parallel calls of a run; each gets its result or its error."""
        outcomes: dict[str, CallResult | ToolqError] = {}
        for call_id in approve:
            outcomes[call_id] = self._attempt(run_id, call_id, lambda c: self.approve(c, by))
        for call_id, reason in (deny or {}).items():
            outcomes[call_id] = self._attempt(
                run_id, call_id, lambda c, r=reason: self.deny(c, by, r)
            )
        return outcomes

    def _attempt(self, run_id: str, call_id: str, decide: Any) -> CallResult | ToolqError:
        try:
            if self.store.run_id(call_id) != run_id:
                raise CallNotFoundError(f"call {call_id} is not part of run {run_id}")
            result: CallResult = decide(call_id)
            return result
        except ToolqError as exc:
            return exc

    def expire_due(self, now: float | None = None, limit: int = 500) -> int:
        """Expire parked calls past their deadline (the sweeper's step); returns how many."""
        moment = time.time() if now is None else now
        due: Any = self.redis.zrangebyscore(
            self.keys.pending_approvals, 0, moment, start=0, num=limit
        )
        expired = 0
        for raw in due:
            call_id = _text(raw)
            run_id = self.store.run_id(call_id)
            if run_id is None:
                self.redis.zrem(self.keys.pending_approvals, call_id)
                continue
            outcome = self._expire(
                keys=[
                    self.keys.call(call_id),
                    self.keys.run_stream(run_id),
                    self.keys.pending_approvals,
                    self.keys.audit_stream,
                ],
                args=[
                    call_id,
                    repr(moment),
                    self.keys.run_channel(run_id),
                    self.settings.stream_maxlen,
                    self.settings.result_ttl,
                    dumps(EXPIRED_RESULT),
                    self.settings.audit_maxlen,
                ],
            )
            expired += _text(outcome) == "expired"
        return expired

    # -- per-run rules ------------------------------------------------------------------------

    def rules(self, run_id: str) -> RunRules:
        """A run's approval rules."""
        return self.policy.run_rules(run_id)

    def set_rules(
        self,
        run_id: str,
        *,
        mode: ApprovalMode | str | None = None,
        approve_tools: Sequence[str] | None = None,
        approval_timeout: float | None = None,
        principal: str | None = None,
        admin: bool = False,
    ) -> RunRules:
        """Set a run's mode (strict/permissive/auto), its approval list or its deadline.

        Only the run's owner (or ``admin``) may (``NotRunOwnerError``); on a run not created
        yet, ``principal`` becomes its owner.
        """
        self.owners.check(run_id, principal, admin=admin, action="change the rules of", claim=True)

        def change(rules: RunRules) -> None:
            if mode is not None:
                rules.mode = ApprovalMode(mode)
            if approve_tools is not None:
                rules.approve_tools = list(approve_tools)
            if approval_timeout is not None:
                rules.approval_timeout = approval_timeout

        return self.policy.update_rules(run_id, change)

    def export_state(self, run_id: str) -> dict[str, Any]:
        """A run's approval state (mode, lists, sticky decisions) to save."""
        return self.policy.export_state(run_id)

    def restore_state(
        self,
        run_id: str,
        state: dict[str, Any],
        *,
        principal: str | None = None,
        admin: bool = False,
    ) -> RunRules:
        """Restore a saved approval state onto a run (owner or ``admin`` only, as ``set_rules``)."""
        self.owners.check(run_id, principal, admin=admin, action="change the rules of", claim=True)
        return self.policy.restore_state(run_id, state)

    # -- internals ---------------------------------------------------------------------------

    def _authorize(self, call_id: str, by: str) -> ApprovalRequest:
        request = self.get(call_id)
        reason = self.policy.refusal(request.risk, request.submitter, by)
        if reason is not None:
            self._audit(request, by, f"refused:{reason}")
            raise NotAuthorizedError(
                f"{by!r} may not decide call {call_id}: {reason.replace('_', ' ')}",
                call_id=call_id,
                by=by,
            )
        return request

    def _run_decide(
        self,
        request: ApprovalRequest,
        decision: str,
        by: str,
        data: dict[str, Any],
        result: dict[str, Any] | None,
        envelope: str,
        digest: str | None,
    ) -> str:
        k = self.keys
        required = self.settings.dangerous_approvals if request.risk is RiskLevel.DANGEROUS else 1
        queue, message = "", ""
        if decision == "approve":
            tool = self.registry.get(request.name)
            timeout = tool.run_timeout(self.settings.default_timeout) if tool else None
            queue, message = self.publisher.message(
                request.call_id, request.risk, timeout, request.run_id
            )
        reply = self._decide(
            keys=[
                k.call(request.call_id),
                k.run_stream(request.run_id),
                k.pending_approvals,
                k.unsent,
                k.audit_stream,
                queue or k.unsent,
                k.queued,
                k.queue_pushes(queue) if queue else k.unsent,
            ],
            args=[
                request.call_id,
                decision,
                by,
                repr(time.time()),
                digest or "",
                required,
                k.run_channel(request.run_id),
                self.settings.stream_maxlen,
                self.settings.result_ttl,
                dumps({**data, "decided_at": time.time()}),
                dumps(result) if result is not None else "",
                envelope,
                self.settings.audit_maxlen,
                dumps(EXPIRED_RESULT),
                message,
            ],
        )
        outcome = _text(reply[0])
        if outcome in ("ok", "partial"):
            return outcome
        call_id = request.call_id
        if outcome == "missing":
            raise CallNotFoundError(f"unknown call id {call_id!r}", call_id=call_id)
        if outcome == "expired":
            raise ApprovalExpiredError(
                f"call {call_id} expired before it was decided", call_id=call_id
            )
        if outcome == "digest":
            raise DigestMismatchError(
                f"call {call_id}: the arguments changed since they were shown (digest "
                f"{request.digest} is current); review the call again",
                call_id=call_id,
                digest=request.digest,
            )
        if outcome == "same_approver":
            raise NotAuthorizedError(
                f"{by!r} already approved call {call_id}; a second, distinct approver is needed",
                call_id=call_id,
                by=by,
            )
        raise NotAwaitingApprovalError(
            f"call {call_id} is {_text(reply[1])}, not awaiting approval",
            call_id=call_id,
            status=_text(reply[1]),
        )

    def _audit(self, request: ApprovalRequest, by: str, outcome: str) -> None:
        self.redis.xadd(
            self.keys.audit_stream,
            {
                "call_id": request.call_id,
                "run_id": request.run_id,
                "tool": request.name,
                "by": by,
                "outcome": outcome,
                "digest": request.digest,
                "ts": repr(time.time()),
            },
            maxlen=self.settings.audit_maxlen,
            approximate=True,
        )


__all__ = ["EXPIRED_RESULT", "ApprovalStore", "digest_arguments", "to_request"]
