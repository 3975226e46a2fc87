"""One typed wrapper per Lua script of ``toolq/results/lua``: keyword arguments in, outcome out.

Every state change of a call is one of these scripts: an atomic compare-and-set that updates
the record, appends the event to the run's stream and publishes a wake-up (``lib/emit.lua``),
so a record and its event never disagree. Each wrapper computes the script's KEYS from
``Keys`` in the order of the file's header; no script builds a key name itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, cast, get_args

from toolq.keys import Keys
from toolq.results.runner import Invocation, Script, text


def outcome(kind: Any, raw: Any, script: Script[Any]) -> Any:
    """``raw`` as one of the ``Literal`` ``kind``'s values; a script replying otherwise is a bug."""
    value = text(raw)
    if value not in get_args(kind):
        raise ValueError(f"{script.name}.lua replied {value!r}, not one of {get_args(kind)}")
    return value


def _emit_keys(keys: Keys) -> list[str]:
    return [keys.webhook_events, keys.webhook_outbox]


# -- call lifecycle -----------------------------------------------------------------------------

CreateOutcome = Literal["new", "dup", "not_owner"]


@dataclass(frozen=True)
class CreateReply:
    """``new`` (value: the event id), ``dup`` (the existing call id) or ``not_owner`` (owner)."""

    outcome: CreateOutcome
    value: str


class Create(Script[CreateReply]):
    """A new call's record, first event and, when runnable, its message (``create.lua``)."""

    file = "create.lua"
    outcomes = get_args(CreateOutcome)
    includes = ("emit", "push")

    def __call__(
        self,
        *,
        keys: Keys,
        idempotency: str,
        call_id: str,
        run_id: str,
        status: str,
        envelope: str,
        etype: str,
        data: str,
        maxlen: int,
        ttl: int,
        now: str,
        deadline: str,
        name: str,
        risk: str,
        idempotent: bool,
        timeout: str,
        result: str,
        message: tuple[str, str] | None,
        owner: str,
        admin: bool,
        fields: dict[str, str] | None = None,
    ) -> Invocation[CreateReply]:
        """An invocation: KEYS and ARGV as the header of ``create.lua`` lists them."""
        queue = message[0] if message else keys.unsent  # an unused key still fills its slot
        return self.invoke(
            [
                idempotency,
                keys.call(call_id),
                keys.run_stream(run_id),
                keys.run_calls(run_id),
                keys.recent_calls,
                keys.unsent,
                keys.pending_approvals,
                queue,
                keys.run_owner(run_id),
                keys.queued,
                keys.queue_pushes(queue) if message else keys.unsent,
                *_emit_keys(keys),
            ],
            [
                call_id,
                status,
                envelope,
                etype,
                data,
                keys.run_channel(run_id),
                maxlen,
                ttl,
                now,
                deadline,
                run_id,
                name,
                risk,
                "1" if idempotent else "0",
                timeout,
                result,
                message[1] if message else "",
                owner,
                "1" if admin else "0",
                *[item for pair in (fields or {}).items() for item in pair],
            ],
        )

    def parse(self, reply: Any) -> CreateReply:
        """The typed outcome of a reply."""
        return CreateReply(outcome(CreateOutcome, reply[0], self), text(reply[1]))


StartOutcome = Literal["ok", "cancelled", "leased", "missing", "skip"]


@dataclass(frozen=True)
class StartReply:
    """``ok`` with the envelope and attempt, or why not (``skip`` with the status seen)."""

    outcome: StartOutcome
    envelope: str | None = None
    attempt: int = 0
    status: str | None = None


class Start(Script[StartReply]):
    """A worker's lease on a queued call, queued → running (``start.lua``)."""

    file = "start.lua"
    outcomes = get_args(StartOutcome)
    includes = ("emit",)

    def __call__(
        self,
        *,
        keys: Keys,
        call_id: str,
        run_id: str,
        token: str,
        lease_ms: int,
        now: str,
        maxlen: int,
        cancel_result: str,
        now_ms: int,
    ) -> Invocation[StartReply]:
        """An invocation: KEYS and ARGV as the header of ``start.lua`` lists them."""
        return self.invoke(
            [
                keys.call(call_id),
                keys.run_stream(run_id),
                keys.lease(call_id),
                keys.cancel(call_id),
                keys.running,
                keys.queued,
                *_emit_keys(keys),
            ],
            [
                call_id,
                token,
                lease_ms,
                now,
                keys.run_channel(run_id),
                maxlen,
                cancel_result,
                now_ms,
                run_id,
            ],
        )

    def parse(self, reply: Any) -> StartReply:
        """The typed outcome of a reply."""
        kind: StartOutcome = outcome(StartOutcome, reply[0], self)
        if kind == "ok":
            return StartReply(kind, text(reply[1]), int(reply[2]))
        return StartReply(kind, status=text(reply[1]) if len(reply) > 1 else None)


FinishOutcome = Literal["ok", "stale"]


class Finish(Script[FinishOutcome]):
    """A running call's final state and event (``finish.lua``); ``stale``: it was lost."""

    file = "finish.lua"
    outcomes = get_args(FinishOutcome)
    includes = ("emit",)

    def __call__(
        self,
        *,
        keys: Keys,
        call_id: str,
        run_id: str,
        token: str,
        status: str,
        result: str,
        etype: str,
        data: str,
        maxlen: int,
        now: str,
        ttl: int,
        undo: str,
        undo_ttl: int,
    ) -> Invocation[FinishOutcome]:
        """An invocation: KEYS and ARGV as the header of ``finish.lua`` lists them."""
        return self.invoke(
            [
                keys.call(call_id),
                keys.run_stream(run_id),
                keys.lease(call_id),
                keys.running,
                keys.undo(call_id),
                *_emit_keys(keys),
            ],
            [
                call_id,
                token,
                status,
                result,
                etype,
                data,
                keys.run_channel(run_id),
                maxlen,
                now,
                ttl,
                undo,
                undo_ttl,
                run_id,
            ],
        )

    def parse(self, reply: Any) -> FinishOutcome:
        """The typed outcome of a reply."""
        return cast(FinishOutcome, outcome(FinishOutcome, reply[0], self))


ProgressOutcome = Literal["ok", "stale"]


class Progress(Script[ProgressOutcome]):
    """A non-final event of a running call (``progress.lua``)."""

    file = "progress.lua"
    outcomes = get_args(ProgressOutcome)
    includes = ("emit",)

    def __call__(
        self,
        *,
        keys: Keys,
        call_id: str,
        run_id: str,
        token: str,
        etype: str,
        data: str,
        maxlen: int,
        now: str,
    ) -> Invocation[ProgressOutcome]:
        """An invocation: KEYS and ARGV as the header of ``progress.lua`` lists them."""
        return self.invoke(
            [keys.call(call_id), keys.run_stream(run_id), *_emit_keys(keys)],
            [call_id, token, etype, data, keys.run_channel(run_id), maxlen, now, run_id],
        )

    def parse(self, reply: Any) -> ProgressOutcome:
        """The typed outcome of a reply."""
        return cast(ProgressOutcome, outcome(ProgressOutcome, reply[0], self))


class Renew(Script[bool]):
    """A lease extended if this token still holds it (``renew.lua``): call or undo lease."""

    file = "renew.lua"

    def __call__(
        self, *, lease: str, running: str, call_id: str, token: str, lease_ms: int, now_ms: int
    ) -> Invocation[bool]:
        """An invocation: KEYS and ARGV as the header of ``renew.lua`` lists them."""
        return self.invoke([lease, running], [call_id, token, lease_ms, now_ms])

    def parse(self, reply: Any) -> bool:
        """The typed outcome of a reply."""
        return bool(reply)


TransitionOutcome = Literal["ok", "conflict", "missing"]


@dataclass(frozen=True)
class TransitionReply:
    """``ok`` (value: the event id), ``conflict`` (the status found) or ``missing``."""

    outcome: TransitionOutcome
    value: str = ""


class Transition(Script[TransitionReply]):
    """The generic compare-and-set of a call's status with its event (``transition.lua``)."""

    file = "transition.lua"
    outcomes = get_args(TransitionOutcome)
    includes = ("emit",)

    def __call__(
        self,
        *,
        keys: Keys,
        call_id: str,
        run_id: str,
        from_states: str,
        to_status: str,
        etype: str,
        data: str,
        maxlen: int,
        now: str,
        ttl: int,
        result: str,
        fields: dict[str, str] | None = None,
    ) -> Invocation[TransitionReply]:
        """An invocation: KEYS and ARGV as the header of ``transition.lua`` lists them."""
        return self.invoke(
            [
                keys.call(call_id),
                keys.run_stream(run_id),
                keys.pending_approvals,
                keys.unsent,
                keys.running,
                *_emit_keys(keys),
            ],
            [
                call_id,
                from_states,
                to_status,
                etype,
                data,
                keys.run_channel(run_id),
                maxlen,
                now,
                ttl,
                result,
                run_id,
                *[item for pair in (fields or {}).items() for item in pair],
            ],
        )

    def parse(self, reply: Any) -> TransitionReply:
        """The typed outcome of a reply."""
        kind: TransitionOutcome = outcome(TransitionOutcome, reply[0], self)
        return TransitionReply(kind, text(reply[1]) if len(reply) > 1 else "")


RecoverOutcome = Literal["requeue", "failed", "timeout", "alive", "gone"]


class Recover(Script[RecoverOutcome]):
    """A running call whose lease expired: requeued or failed (``recover.lua``)."""

    file = "recover.lua"
    outcomes = get_args(RecoverOutcome)
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
        max_recoveries: int,
        lost_result: str,
        timeout_result: str,
    ) -> Invocation[RecoverOutcome]:
        """An invocation: KEYS and ARGV as the header of ``recover.lua`` lists them."""
        return self.invoke(
            [
                keys.call(call_id),
                keys.lease(call_id),
                keys.running,
                keys.run_stream(run_id),
                keys.unsent,
                *_emit_keys(keys),
            ],
            [
                call_id,
                now,
                keys.run_channel(run_id),
                maxlen,
                ttl,
                max_recoveries,
                lost_result,
                timeout_result,
                run_id,
            ],
        )

    def parse(self, reply: Any) -> RecoverOutcome:
        """The typed outcome of a reply."""
        return cast(RecoverOutcome, outcome(RecoverOutcome, reply[0], self))


class Resend(Script[bool]):
    """The sweeper's re-send of a call still queued (``resend.lua``); True if pushed."""

    file = "resend.lua"
    includes = ("push",)

    def __call__(
        self, *, keys: Keys, call_id: str, queue: str, message: str, now: str
    ) -> Invocation[bool]:
        """An invocation: KEYS and ARGV as the header of ``resend.lua`` lists them."""
        return self.invoke(
            [
                keys.call(call_id),
                queue,
                keys.queue_pushes(queue),
                keys.queued,
                keys.unsent,
                keys.lost_suspect(call_id),
            ],
            [call_id, message, now],
        )

    def parse(self, reply: Any) -> bool:
        """The typed outcome of a reply."""
        return bool(int(reply))


# -- approvals ----------------------------------------------------------------------------------

DecideOutcome = Literal["ok", "partial", "expired", "digest", "retry", "missing", "conflict"]
Decision = Literal["approve", "deny"]
AuditOutcome = Literal["approved", "approved:partial", "denied", "expired"]
"""What DECIDE and EXPIRE write as an audit entry's ``outcome`` (refusals are Python's)."""


@dataclass(frozen=True)
class DecideReply:
    """The decision's outcome; ``conflict`` carries the status found."""

    outcome: DecideOutcome
    value: str = ""


class Decide(Script[DecideReply]):
    """A human's decision on a parked call, one compare-and-set (``decide.lua``)."""

    file = "decide.lua"
    outcomes = get_args(DecideOutcome)
    includes = ("emit", "push")

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
                *_emit_keys(keys),
            ],
            [
                call_id,
                decision,
                by,
                now,
                envelope_read,
                "1" if check_approvals else "0",
                keys.run_channel(run_id),
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
        return DecideReply(kind, text(reply[1]) if len(reply) > 1 else "")


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
    ) -> Invocation[ExpireOutcome]:
        """An invocation: KEYS and ARGV as the header of ``expire.lua`` lists them."""
        return self.invoke(
            [
                keys.call(call_id),
                keys.run_stream(run_id),
                keys.pending_approvals,
                keys.audit_stream,
                *_emit_keys(keys),
            ],
            [call_id, now, keys.run_channel(run_id), maxlen, ttl, result, audit_maxlen, run_id],
        )

    def parse(self, reply: Any) -> ExpireOutcome:
        """The typed outcome of a reply."""
        return cast(ExpireOutcome, outcome(ExpireOutcome, reply, self))


# -- undo ---------------------------------------------------------------------------------------

UndoClaimOutcome = Literal["ok", "missing", "in_progress", "undone", "nothing"]


class UndoClaim(Script[UndoClaimOutcome]):
    """An undo requested with its message pushed (``undo_claim.lua``)."""

    file = "undo_claim.lua"
    outcomes = get_args(UndoClaimOutcome)
    includes = ("push",)

    def __call__(
        self, *, keys: Keys, call_id: str, queue: str, message: str, now: str
    ) -> Invocation[UndoClaimOutcome]:
        """An invocation: KEYS and ARGV as the header of ``undo_claim.lua`` lists them."""
        return self.invoke(
            [
                keys.call(call_id),
                keys.undo(call_id),
                queue,
                keys.queue_pushes(queue),
                keys.undo_queued,
            ],
            [call_id, now, message],
        )

    def parse(self, reply: Any) -> UndoClaimOutcome:
        """The typed outcome of a reply."""
        return cast(UndoClaimOutcome, outcome(UndoClaimOutcome, reply, self))


UndoStartOutcome = Literal["ok", "leased", "skip"]


class UndoStart(Script[tuple[UndoStartOutcome, str]]):
    """A worker's lease on a requested undo (``undo_start.lua``): outcome and state seen."""

    file = "undo_start.lua"
    outcomes = get_args(UndoStartOutcome)

    def __call__(
        self, *, keys: Keys, call_id: str, token: str, lease_ms: int, now: str, now_ms: int
    ) -> Invocation[tuple[UndoStartOutcome, str]]:
        """An invocation: KEYS and ARGV as the header of ``undo_start.lua`` lists them."""
        return self.invoke(
            [keys.call(call_id), keys.undo_lease(call_id), keys.undoing, keys.undo_queued],
            [call_id, token, lease_ms, now, now_ms],
        )

    def parse(self, reply: Any) -> tuple[UndoStartOutcome, str]:
        """The typed outcome of a reply."""
        kind: UndoStartOutcome = outcome(UndoStartOutcome, reply[0], self)
        return kind, text(reply[1]) if len(reply) > 1 else ""


UndoFinishOutcome = Literal["ok", "stale"]


class UndoFinish(Script[UndoFinishOutcome]):
    """The end of an undo, undone or failed, with its event (``undo_finish.lua``)."""

    file = "undo_finish.lua"
    outcomes = get_args(UndoFinishOutcome)
    includes = ("emit",)

    def __call__(
        self,
        *,
        keys: Keys,
        call_id: str,
        run_id: str,
        token: str,
        state: str,
        etype: str,
        data: str,
        maxlen: int,
        now: str,
    ) -> Invocation[UndoFinishOutcome]:
        """An invocation: KEYS and ARGV as the header of ``undo_finish.lua`` lists them."""
        return self.invoke(
            [
                keys.call(call_id),
                keys.run_stream(run_id),
                keys.undo_lease(call_id),
                keys.undoing,
                keys.undo(call_id),
                *_emit_keys(keys),
            ],
            [call_id, token, state, etype, data, keys.run_channel(run_id), maxlen, now, run_id],
        )

    def parse(self, reply: Any) -> UndoFinishOutcome:
        """The typed outcome of a reply."""
        return cast(UndoFinishOutcome, outcome(UndoFinishOutcome, reply[0], self))


UndoRecoverOutcome = Literal["requeue", "failed", "alive", "gone"]


class UndoRecover(Script[UndoRecoverOutcome]):
    """An undo whose worker died: requested again or failed (``undo_recover.lua``)."""

    file = "undo_recover.lua"
    outcomes = get_args(UndoRecoverOutcome)
    includes = ("emit", "push")

    def __call__(
        self,
        *,
        keys: Keys,
        call_id: str,
        run_id: str,
        queue: str,
        message: str,
        now: str,
        maxlen: int,
        max_recoveries: int,
        lost_data: str,
    ) -> Invocation[UndoRecoverOutcome]:
        """An invocation: KEYS and ARGV as the header of ``undo_recover.lua`` lists them."""
        return self.invoke(
            [
                keys.call(call_id),
                keys.undo_lease(call_id),
                keys.undoing,
                keys.run_stream(run_id),
                queue,
                keys.queue_pushes(queue),
                keys.undo_queued,
                *_emit_keys(keys),
            ],
            [
                call_id,
                now,
                keys.run_channel(run_id),
                maxlen,
                max_recoveries,
                lost_data,
                message,
                run_id,
            ],
        )

    def parse(self, reply: Any) -> UndoRecoverOutcome:
        """The typed outcome of a reply."""
        return cast(UndoRecoverOutcome, outcome(UndoRecoverOutcome, reply, self))


class UndoResend(Script[bool]):
    """The sweeper's re-send of an undo still requested (``undo_resend.lua``)."""

    file = "undo_resend.lua"
    includes = ("push",)

    def __call__(
        self, *, keys: Keys, call_id: str, queue: str, message: str, now: str
    ) -> Invocation[bool]:
        """An invocation: KEYS and ARGV as the header of ``undo_resend.lua`` lists them."""
        return self.invoke(
            [
                keys.call(call_id),
                queue,
                keys.queue_pushes(queue),
                keys.undo_queued,
                keys.lost_undo_suspect(call_id),
            ],
            [call_id, message, now],
        )

    def parse(self, reply: Any) -> bool:
        """The typed outcome of a reply."""
        return bool(int(reply))


# -- webhooks -----------------------------------------------------------------------------------


class WebhookClaim(Script[dict[str, str] | None]):
    """A due webhook delivery taken for one attempt (``webhook_claim.lua``); its fields."""

    file = "webhook_claim.lua"

    def __call__(
        self, *, keys: Keys, delivery_id: str, now: str, until: str
    ) -> Invocation[dict[str, str] | None]:
        """An invocation: KEYS and ARGV as the header of ``webhook_claim.lua`` lists them."""
        return self.invoke(
            [keys.webhook_due, keys.webhook_delivery(delivery_id)], [delivery_id, now, until]
        )

    def parse(self, reply: Any) -> dict[str, str] | None:
        """The typed outcome of a reply."""
        if not reply:
            return None
        return {text(reply[i]): text(reply[i + 1]) for i in range(0, len(reply), 2)}


CREATE = Create()
START = Start()
FINISH = Finish()
PROGRESS = Progress()
RENEW = Renew()
TRANSITION = Transition()
RECOVER = Recover()
RESEND = Resend()
DECIDE = Decide()
EXPIRE = Expire()
UNDO_CLAIM = UndoClaim()
UNDO_START = UndoStart()
UNDO_FINISH = UndoFinish()
UNDO_RECOVER = UndoRecover()
UNDO_RESEND = UndoResend()
WEBHOOK_CLAIM = WebhookClaim()

ALL: tuple[Script[Any], ...] = (
    CREATE,
    START,
    FINISH,
    PROGRESS,
    RENEW,
    TRANSITION,
    RECOVER,
    RESEND,
    DECIDE,
    EXPIRE,
    UNDO_CLAIM,
    UNDO_START,
    UNDO_FINISH,
    UNDO_RECOVER,
    UNDO_RESEND,
    WEBHOOK_CLAIM,
)
"""Every script, one per ``.lua`` file outside ``lib/``."""
