"""Decisions on parked calls: DECIDE and the sweeper's EXPIRE."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, cast, get_args

from toolq.keys import Keys
from toolq.quotas import DEFAULT_TENANT
from toolq.results.connection import as_text
from toolq.results.runner import Invocation, Script, emit_keys, outcome

DecideOutcome = Literal["ok", "partial", "expired", "digest", "retry", "missing", "conflict"]
Decision = Literal["approve", "deny"]


@dataclass(frozen=True)
class DecideReply:
    """The decision's outcome; ``conflict`` carries the status found."""

    outcome: DecideOutcome
    value: str = ""


class Decide(Script[DecideReply]):
    """A human's decision on a parked call, one compare-and-set (``decide.lua``)."""

    file = "decide.lua"
    outcomes = get_args(DecideOutcome)
    includes = ("emit", "push", "sched")

    def __call__(
        self,
        *,
        keys: Keys,
        call_id: str,
        run_id: str,
        decision: Decision,
        by: str,
        now: str,
        envelope_read: str,
        check_approvals: bool,
        maxlen: int,
        ttl: int,
        event_data: str,
        result: str,
        envelope: str,
        audit_maxlen: int,
        expired_result: str,
        message: tuple[str, str] | None,
        approvals_read: str,
        approvals_new: str,
        final: bool,
        new_digest: str,
        approval: str,
        tool: str,
        audit_sig: str,
        expired_sig: str,
        digest: str,
        shown: str,
        tenant: str = DEFAULT_TENANT,
    ) -> Invocation[DecideReply]:
        """An invocation: KEYS and ARGV as the header of ``decide.lua`` lists them."""
        queue = message[0] if message else keys.unsent  # an unused key still fills its slot
        return self.invoke(
            [
                keys.call(call_id),
                keys.run_stream(run_id),
                keys.pending_approvals,
                keys.unsent,
                keys.audit_stream,
                queue,
                keys.queued,
                keys.queue_pushes(queue) if message else keys.unsent,
                *emit_keys(keys),
                keys.parked,
                keys.tenant_parked(tenant),
            ],
            [
                call_id,
                decision,
                by,
                now,
                envelope_read,
                "1" if check_approvals else "0",
                maxlen,
                ttl,
                event_data,
                result,
                envelope,
                audit_maxlen,
                expired_result,
                message[1] if message else "",
                approvals_read,
                approvals_new,
                "1" if final else "0",
                new_digest,
                approval,
                run_id,
                tool,
                audit_sig,
                expired_sig,
                digest,
                shown,
            ],
        )

    def parse(self, reply: Any) -> DecideReply:
        """The typed outcome of a reply."""
        kind: DecideOutcome = outcome(DecideOutcome, reply[0], self)
        return DecideReply(kind, as_text(reply[1]) if len(reply) > 1 else "")


ExpireOutcome = Literal["expired", "early", "gone"]


class Expire(Script[ExpireOutcome]):
    """The sweeper's expiry of a parked call past its deadline (``expire.lua``)."""

    file = "expire.lua"
    outcomes = get_args(ExpireOutcome)
    includes = ("emit",)

    def __call__(
        self,
        *,
        keys: Keys,
        call_id: str,
        run_id: str,
        now: str,
        maxlen: int,
        ttl: int,
        result: str,
        audit_maxlen: int,
        tenant: str = DEFAULT_TENANT,
    ) -> Invocation[ExpireOutcome]:
        """An invocation: KEYS and ARGV as the header of ``expire.lua`` lists them."""
        return self.invoke(
            [
                keys.call(call_id),
                keys.run_stream(run_id),
                keys.pending_approvals,
                keys.audit_stream,
                *emit_keys(keys),
                keys.parked,
                keys.tenant_parked(tenant),
            ],
            [call_id, now, maxlen, ttl, result, audit_maxlen, run_id],
        )

    def parse(self, reply: Any) -> ExpireOutcome:
        """The typed outcome of a reply."""
        return cast(ExpireOutcome, outcome(ExpireOutcome, reply, self))


DECIDE = Decide()
EXPIRE = Expire()
