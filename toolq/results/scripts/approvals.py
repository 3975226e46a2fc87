"""Decisions on parked calls: DECIDE and the sweeper's EXPIRE."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Literal, get_args

from toolq.keys import Keys
from toolq.quotas import DEFAULT_TENANT
from toolq.results.runner import Invocation, Reply, Script, emit_keys, flag

DecideOutcome = Literal["ok", "partial", "expired", "digest", "retry", "missing", "conflict"]
DecisionKind = Literal["approve", "deny"]


@dataclass(frozen=True)
class Decision:
    """One decision on a parked call, as DECIDE commits it.

    Its fields are ``decide.lua``'s ARGV, by name and in the order of its header; DECIDE
    fills ARGV from them by name (flags as ``'1'``/``'0'``, ``message`` as its text).
    """

    call_id: str
    kind: DecisionKind
    by: str
    now: str
    envelope_read: str
    """The envelope as the approver read it (``""``: unchecked)."""
    check_approvals: bool
    maxlen: int
    ttl: int
    data: str
    """The event's data (JSON)."""
    result: str
    """A denial's result (JSON)."""
    new_envelope: str
    """The edited envelope (``""``: unchanged)."""
    audit_maxlen: int
    expired_result: str
    message: tuple[str, str] | None
    """``(queue, message)`` of an approval that makes the call runnable."""
    approvals_read: str
    approvals_new: str
    final: bool
    new_digest: str
    approval: str
    """The signed decision."""
    run_id: str
    tool: str
    audit_sig: str
    expired_sig: str
    digest: str
    shown: str


DecideReply = Reply[DecideOutcome]
"""The decision's outcome; ``conflict`` carries the status found."""


class Decide(Script[DecideReply]):
    """A human's decision on a parked call, one compare-and-set (``decide.lua``)."""

    file = "decide.lua"
    outcomes = get_args(DecideOutcome)
    includes = ("emit", "push", "sched", "park", "audit")

    def __call__(
        self, *, keys: Keys, decision: Decision, tenant: str = DEFAULT_TENANT
    ) -> Invocation[DecideReply]:
        """An invocation: KEYS as the header of ``decide.lua`` lists them, ARGV ``decision``'s.

        ``tenant``: the call's, whose index of parked calls it leaves.
        """
        message = decision.message
        queue = message[0] if message else keys.unsent  # an unused key still fills its slot
        argv = {field.name: getattr(decision, field.name) for field in fields(decision)}
        argv.update(
            check_approvals=flag(decision.check_approvals),
            message=message[1] if message else "",
            final=flag(decision.final),
        )
        return self.invoke(
            keys={
                "call": keys.call(decision.call_id),
                "stream": keys.run_stream(decision.run_id),
                "pending_approvals": keys.pending_approvals,
                "unsent": keys.unsent,
                "audit_stream": keys.audit_stream,
                "queue": queue,
                "queued": keys.queued,
                "pushes": keys.queue_pushes(queue) if message else keys.unsent,
                **emit_keys(keys),
                "parked": keys.parked,
                "tenant_parked": keys.tenant_parked(tenant),
                "audit_chain": keys.audit_chain,
            },
            argv=argv,
        )

    def parse(self, reply: Any) -> DecideReply:
        """The outcome word and the value after it."""
        return self.reply(reply)


ExpireOutcome = Literal["expired", "early", "gone"]


class Expire(Script[ExpireOutcome]):
    """The sweeper's expiry of a parked call past its deadline (``expire.lua``)."""

    file = "expire.lua"
    outcomes = get_args(ExpireOutcome)
    includes = ("emit", "park", "audit")

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
            keys={
                "call": keys.call(call_id),
                "stream": keys.run_stream(run_id),
                "pending_approvals": keys.pending_approvals,
                "audit_stream": keys.audit_stream,
                **emit_keys(keys),
                "parked": keys.parked,
                "tenant_parked": keys.tenant_parked(tenant),
                "audit_chain": keys.audit_chain,
            },
            argv={
                "call_id": call_id,
                "now": now,
                "maxlen": maxlen,
                "ttl": ttl,
                "result": result,
                "audit_maxlen": audit_maxlen,
                "run_id": run_id,
            },
        )


DECIDE = Decide()
EXPIRE = Expire()


ResolveOutcome = Literal["ok", "missing", "conflict", "retry"]


ResolveReply = Reply[ResolveOutcome]
"""A resolution's outcome: ``ok`` (the event id), ``conflict`` (the status found)...

``missing``: no such call; ``retry``: it was started again since it was read.
"""


class Resolve(Script[ResolveReply]):
    """A person's outcome for a call of unknown outcome (``resolve.lua``)."""

    file = "resolve.lua"
    outcomes = get_args(ResolveOutcome)
    includes = ("emit", "sched")

    def __call__(
        self,
        *,
        keys: Keys,
        call_id: str,
        run_id: str,
        outcome: str,
        by: str,
        now: str,
        maxlen: int,
        ttl: int,
        result: str,
        resolution: str,
        data: str,
        attempt: int,
        etype: str,
    ) -> Invocation[ResolveReply]:
        """An invocation: KEYS and ARGV as the header of ``resolve.lua`` lists them."""
        return self.invoke(
            keys={
                "call": keys.call(call_id),
                "stream": keys.run_stream(run_id),
                "unknown": keys.unknown,
                "unsent": keys.unsent,
                **emit_keys(keys),
            },
            argv={
                "call_id": call_id,
                "outcome": outcome,
                "by": by,
                "now": now,
                "maxlen": maxlen,
                "ttl": ttl,
                "result": result,
                "resolution": resolution,
                "data": data,
                "run_id": run_id,
                "attempt": attempt,
                "etype": etype,
            },
        )

    def parse(self, reply: Any) -> ResolveReply:
        """The outcome word and the value after it."""
        return self.reply(reply)


RESOLVE = Resolve()
