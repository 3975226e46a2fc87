"""``ApprovalStore``: parked calls in Redis, decided by one compare-and-set each."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from toolq.errors import CallNotFoundError, NotAwaitingApprovalError
from toolq.models import CallResult, CallStatus, EventType, RiskLevel
from toolq.results.store import CallStore, record_to_result

if TYPE_CHECKING:
    from toolq.workers.app import Publisher


class ApprovalStore:
    """Lists, approves and denies calls that are ``awaiting_approval``."""

    def __init__(self, store: CallStore, publisher: Publisher) -> None:
        self.store = store
        self.publisher = publisher
        self.keys = store.keys

    def pending(
        self,
        run_id: str | None = None,
        risk: RiskLevel | str | None = None,
        tool: str | None = None,
    ) -> list[CallResult]:
        """Calls awaiting a decision, soonest deadline first, optionally filtered."""
        raw: Any = self.store.redis.zrange(self.keys.pending_approvals, 0, -1)
        ids = [c.decode() if isinstance(c, bytes) else str(c) for c in raw]
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
            out.append(record_to_result(record))
        return out

    def approve(self, call_id: str, by: str, note: str | None = None) -> CallResult:
        """Approve and enqueue a parked call; exactly one of racing approvers wins."""
        data: dict[str, Any] = {"status": CallStatus.QUEUED.value, "by": by, "decision": "approved"}
        if note:
            data["note"] = note
        self._decide(call_id, CallStatus.QUEUED, EventType.APPROVED, data, None)
        record: Any = self.store.redis.hmget(self.keys.call(call_id), "risk", "timeout")
        risk, timeout = (v.decode() if v else "" for v in record)
        self.publisher.send(call_id, RiskLevel(risk), float(timeout) if timeout else None)
        self.store.mark_sent([call_id])
        return self.store.result(call_id)

    def deny(self, call_id: str, by: str, reason: str) -> CallResult:
        """Deny a parked call; the model reads ``reason``."""
        message = f"denied by {by}: {reason}" if reason else f"denied by {by}"
        result: dict[str, Any] = {"error": message, "error_type": "approval_denied"}
        data: dict[str, Any] = {
            "status": CallStatus.DENIED.value,
            "by": by,
            "decision": "denied",
            "reason": reason,
        }
        self._decide(call_id, CallStatus.DENIED, EventType.DENIED, data, result)
        return self.store.result(call_id)

    def _decide(
        self,
        call_id: str,
        to: CallStatus,
        event: EventType,
        data: dict[str, Any],
        result: dict[str, Any] | None,
    ) -> None:
        data["decided_at"] = time.time()
        ok, current = self.store.transition(
            call_id,
            from_states=[CallStatus.AWAITING_APPROVAL],
            to=to,
            event=event,
            data=data,
            result=result,
        )
        if not ok:
            raise NotAwaitingApprovalError(
                f"call {call_id} is {current}, not awaiting approval",
                call_id=call_id,
                status=current,
            )

    def get(self, call_id: str) -> CallResult:
        """The call's current state (any state)."""
        return self.store.result(call_id)

    def require_known(self, call_ids: Sequence[str]) -> None:
        """Raise ``CallNotFoundError`` for the first unknown id."""
        for call_id, record in zip(call_ids, self.store.records(call_ids), strict=True):
            if record is None:
                raise CallNotFoundError(f"unknown call id {call_id!r}", call_id=call_id)
