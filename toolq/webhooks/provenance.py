"""``Provenance``: what a delivery may say, read again at each attempt and checked.

The outbox and the delivery records are Redis data that any Redis client (every submitter)
can write, so they only say *which* event to send. At each attempt the event is read from
its run's stream, the call's tool and risk from its record, and a decision
(``call.approved``, ``call.denied``) goes out only when a signature by the approvers' key
(``TOOLQ_APPROVAL_VERIFY_KEYS``, as workers verify approvals) vouches for it: the record's
signed decision of that kind for this call and run, made by the approver the event names,
or, for one approval of a quorum, that approver's own signed approval. A person's name is
never taken from anything else: other events go out without ``by``.

What a Redis writer can still make a webhook say: any event that carries no decision
(queued, awaiting approval, failed, ...) with the tool, risk, arguments and texts it likes,
and a decision again that an approver really made for that call (a duplicate). Without
verify keys nothing can be checked and decisions go out as recorded.
"""

from __future__ import annotations

import json
from typing import Any

import redis

from toolq.keys import Keys
from toolq.models import CallEnvelope, EventType, RiskLevel
from toolq.results.connection import as_text
from toolq.results.replication import ReplicaAcks
from toolq.signing import Verifier, call_facts
from toolq.webhooks.outbox import Claimed
from toolq.webhooks.payload import Notice

DECISIONS = {EventType.APPROVED.value: "approve", EventType.DENIED.value: "deny"}
"""Event types that report a decision, and the decision they report."""
RULE = "rule"
"""``approved_by`` of a call a sticky rule let through: no one's name."""


class Unverified(Exception):
    """A delivery that cannot be vouched for; not sent (its message says why)."""


_FINAL_TYPES = frozenset(t.value for t in EventType if t.is_final)


class Unconfirmed(Exception):
    """A final event the replicas do not hold yet (``TOOLQ_MIN_REPLICAS_ACK``).

    A failover could take it back, so it is not sent now; the delivery is attempted again.
    """


class Provenance:
    """Builds a delivery's ``Notice`` from the run's stream and the call's signed record."""

    def __init__(
        self,
        client: redis.Redis,
        keys: Keys,
        verifier: Verifier | None,
        acks: ReplicaAcks | None = None,
    ) -> None:
        self.redis = client
        self.keys = keys
        self.verifier = verifier
        self.acks = acks
        """With ``TOOLQ_MIN_REPLICAS_ACK``: the event and the record are read with a fence,
        and a final event the replicas do not hold is not sent (``Unconfirmed``)."""

    def notice(self, claimed: Claimed, wanted: set[str]) -> Notice:
        """The claimed delivery's event as it may go out, if of a ``wanted`` type."""
        run_id, event_id = claimed.run_id, claimed.event_id
        # The event read with the fence, if any: the script that wrote it wrote the call's
        # state first, so replicas that hold the event hold that state.
        pipe = self.redis.pipeline(transaction=False)
        pipe.xrange(self.keys.run_stream(run_id), event_id, event_id, count=1)
        fenced = self.acks is not None and self.acks.fence(pipe)
        replies = pipe.execute()
        found = replies[0]
        if not found:
            raise Unverified(f"event {event_id} is not in the stream of run {run_id!r}")
        event = {as_text(k): as_text(v) for k, v in found[0][1].items()}
        etype, call_id = event.get("type", ""), event.get("call_id", "")
        if etype not in wanted:
            raise Unverified(f"event {event_id} is a {etype!r}, which the endpoint does not take")
        unconfirmed = fenced and self.acks is not None and not self.acks.held(replies)
        if unconfirmed and etype in _FINAL_TYPES:
            raise Unconfirmed(f"the replicas do not hold event {event_id} ({etype}) yet")
        fields = ("run_id", "name", "risk", "approval", "approvers", "envelope")
        raw: Any = self.redis.hmget(self.keys.call(call_id), fields)
        record = {name: as_text(value) for name, value in zip(fields, raw, strict=True) if value}
        if record.get("run_id", run_id) != run_id:
            raise Unverified(f"call {call_id} of event {event_id} belongs to another run")
        try:
            data = json.loads(event.get("data") or "{}")
        except ValueError:
            data = {}
        if not isinstance(data, dict):
            data = {}
        return Notice(
            delivery_id=claimed.delivery_id,
            type=etype,
            call_id=call_id,
            run_id=run_id,
            tool=record.get("name", ""),
            risk=record.get("risk", ""),
            ts=float(event.get("ts") or 0),
            data=self._vouched(etype, call_id, run_id, record, data),
        )

    def _vouched(
        self,
        etype: str,
        call_id: str,
        run_id: str,
        record: dict[str, str],
        data: dict[str, Any],
    ) -> dict[str, Any]:
        """``data`` with only the names a signature vouches for (see the module docstring)."""
        shown = {k: v for k, v in data.items() if k not in ("by", "approved_by")}
        if data.get("approved_by") == RULE:
            shown["approved_by"] = RULE
        decision = DECISIONS.get(etype)
        by = data.get("by")
        if decision is None or by is None:
            return shown
        if self.verifier is not None and not (
            isinstance(by, str) and self._signed(decision, by, call_id, run_id, record)
        ):
            raise Unverified(
                f"no signature by an approvers' key says {by!r} decided to {decision} call "
                f"{call_id}"
            )
        shown["by"] = by
        return shown

    def _signed(
        self, decision: str, by: str, call_id: str, run_id: str, record: dict[str, str]
    ) -> bool:
        assert self.verifier is not None
        final = self.verifier.payload(record.get("approval", ""), "decision")
        if (
            final is not None
            and final.get("call_id") == call_id
            and final.get("run_id") == run_id
            and final.get("decision") == decision
        ):
            approvers = final.get("approvers")
            if final.get("by") == by or (
                decision == "approve" and isinstance(approvers, list) and by in approvers
            ):
                return True
        return decision == "approve" and self._approved_in_quorum(by, call_id, run_id, record)

    def _approved_in_quorum(
        self, by: str, call_id: str, run_id: str, record: dict[str, str]
    ) -> bool:
        """True when ``by``'s own signed approval (one of a quorum) is on the record.

        The facts are the record's: one a Redis writer changed (a lowered risk) no longer
        matches the signature, and the notification is refused.
        """
        assert self.verifier is not None
        try:
            envelope = CallEnvelope.model_validate_json(record.get("envelope", ""))
            risk = RiskLevel(record.get("risk", ""))
            approvals = json.loads(record.get("approvers") or "[]")
        except ValueError:
            return False
        if (envelope.call_id, envelope.run_id) != (call_id, run_id):
            return False
        for approval in approvals if isinstance(approvals, list) else []:
            if not isinstance(approval, dict) or approval.get("by") != by:
                continue
            facts = call_facts(envelope, risk, str(approval.get("digest", "")))
            if self.verifier.approves(facts, approval):
                return True
        return False
