"""A call's life: CREATE, CREATE_GROUP, START, FINISH, PROGRESS, RENEW, TRANSITION, ..."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

from toolq.keys import Keys
from toolq.quotas import DEFAULT_TENANT
from toolq.results.connection import as_text
from toolq.results.runner import (
    Invocation,
    Reply,
    Script,
    emit_keys,
    flag,
    lua_source,
    outcome,
    pairs,
    push_keys,
)

CreateOutcome = Literal["new", "over_budget", "dup", "call_id_conflict", "not_owner"]


CreateReply = Reply[CreateOutcome]
"""A CREATE outcome and its value.

    ``new``/``over_budget``: the event id (the latter created denied); ``dup`` and
    ``call_id_conflict``: the call id the key names; ``not_owner``: the run's owner."""


BUDGET_LEFT_MARK = "__TOOLQ_BUDGET_LEFT__"
"""Stands for what is left of the budget in ``Charge``'s texts; ``create.lua`` fills it in."""


@dataclass(frozen=True)
class Charge:
    """A call's cost against its tenant's budget, and the call it becomes when over it."""

    cost: float
    limit: float
    period: str
    """The budget period's name (``Keys.tenant_spent``)."""
    ttl: int
    denied_result: str
    """Result JSON of the call when over budget, ``BUDGET_LEFT_MARK`` for what is left."""
    denied_data: str
    """Its ``call.denied`` event data (JSON), with the same mark."""
    denied_envelope: str = ""
    """The envelope stored instead (secrets masked); ``""`` keeps the call's own."""


class Create(Script[CreateReply]):
    """A new call's record, first event and, when runnable, its message (``create.lua``)."""

    file = "create.lua"
    outcomes = get_args(CreateOutcome)
    includes = ("emit", "push", "sched")

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
        refresh: bool,
        tenant: str = DEFAULT_TENANT,
        charge: Charge | None = None,
        fields: dict[str, str] | None = None,
        schedule: tuple[str, str] | None = None,
        fingerprint: str = "",
        grouped: bool = False,
        notify: str = "",
    ) -> Invocation[CreateReply]:
        """An invocation: KEYS and ARGV as the header of ``create.lua`` lists them.

        ``refresh``: this is the dispatch's last call of its run, which sets the run's TTLs.
        ``charge``: the call's cost and its tenant's budget (``None``: nothing to charge).
        ``schedule``: ``(backlog, lane)`` of a call that goes through admission.
        ``fingerprint``: the call's tool and arguments, claimed with the idempotency key
        (``""``: a reuse of the key is never a conflict).
        ``grouped``: a member of a CREATE_GROUP group, whose message the group's carries.
        ``notify``: the inbox its final event is copied to (``""``: none).
        """
        queue = message[0] if message else keys.unsent  # an unused key still fills its slot
        backlog, lane = schedule or (keys.unsent, keys.unsent)
        return self.invoke(
            keys={
                "idempotency": idempotency,
                "call": keys.call(call_id),
                "stream": keys.run_stream(run_id),
                "run_calls": keys.run_calls(run_id),
                "recent": keys.recent_calls,
                "unsent": keys.unsent,
                "pending_approvals": keys.pending_approvals,
                "queue": queue,
                "run_owner": keys.run_owner(run_id),
                "queued": keys.queued,
                "pushes": keys.queue_pushes(queue) if message else keys.unsent,
                "spent": keys.tenant_spent(tenant, charge.period) if charge else keys.unsent,
                **emit_keys(keys),
                "backlog": backlog,
                "lane": lane,
                "parked": keys.parked,
                "tenant_parked": keys.tenant_parked(tenant),
                "runs": keys.runs,
                "tenant_runs": keys.tenant_runs(tenant),
            },
            argv={
                "call_id": call_id,
                "status": status,
                "envelope": envelope,
                "etype": etype,
                "data": data,
                "maxlen": maxlen,
                "ttl": ttl,
                "now": now,
                "deadline": deadline,
                "run_id": run_id,
                "name": name,
                "risk": risk,
                "idempotent": flag(idempotent),
                "timeout": timeout,
                "result": result,
                "message": GROUPED if grouped else message[1] if message else "",
                "submitter": owner,
                "admin": flag(admin),
                "refresh": flag(refresh),
                "tenant": tenant,
                "cost_text": repr(charge.cost) if charge else "0",
                "limit": repr(charge.limit) if charge else "",
                "spent_ttl": charge.ttl if charge else 0,
                "denied_result": charge.denied_result if charge else "",
                "denied_data": charge.denied_data if charge else "",
                "denied_envelope": charge.denied_envelope if charge else "",
                "schedule": flag(schedule is not None),
                "fingerprint": fingerprint,
                "notify": notify,
            },
            extra_argv=pairs(fields),
        )

    def parse(self, reply: Any) -> CreateReply:
        """The typed outcome of a reply."""
        return self.reply(reply)


GROUPED = "group"
"""CREATE's message of a call its group's message carries (no JSON message reads so)."""


class CreateGroup(Script[list[CreateReply]]):
    """Consecutive new calls, each as CREATE makes it, and one message per group of them.

    ``create_group.lua`` runs ``create.lua``'s own text once per call (as a local function
    of that call's KEYS and ARGV), in order, then pushes each group's message: records and
    messages are written by one script.
    """

    file = "create_group.lua"
    includes = Create.includes

    def text(self) -> str:
        """The libraries, ``create.lua`` as the local function ``create_one``, then the file."""
        parts = [lua_source(f"lib/{name}.lua") for name in self.includes]
        create_one = f"local function create_one(KEYS, ARGV)\n{lua_source(Create.file)}\nend"
        return "\n".join([*parts, create_one, lua_source(self.file)])

    def __call__(
        self,
        *,
        keys: Keys,
        now: str,
        messages: Sequence[tuple[str, str]],
        members: Sequence[tuple[str, int, Invocation[CreateReply]]],
        schedules: Sequence[tuple[str, str] | None] = (),
    ) -> Invocation[list[CreateReply]]:
        """An invocation for ``(queue, message)`` groups and ``(call_id, group, CREATE)``.

        ``group`` numbers the call's message from 1 (its CREATE then has no message of its
        own); 0 leaves the call's CREATE as it is. ``schedules``: per message, the
        ``(backlog, lane)`` of a scheduled group (backlogged, not pushed), or ``None``.
        """
        plans = list(schedules) or [None] * len(messages)
        call_keys: list[str] = []
        for (queue, _), plan in zip(messages, plans, strict=True):
            call_keys.extend([queue, keys.queue_pushes(queue), *(plan or (keys.unsent,) * 2)])
        args: list[Any] = [*(m for _, m in messages), *(flag(plan is not None) for plan in plans)]
        for call_id, group, member in members:
            call_keys.extend([keys.call(call_id), *member.keys])
            args.extend([call_id, group, len(member.keys), len(member.args), *member.args])
        return self.invoke(
            keys={"queued": keys.queued},
            argv={"now": now, "m": len(messages), "n": len(members)},
            extra_keys=call_keys,
            extra_argv=args,
        )

    def parse(self, reply: Any) -> list[CreateReply]:
        """One typed CREATE outcome per call."""
        return [CREATE.parse(item) for item in reply]


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
    includes = ("emit", "sched")

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
            keys={
                "call": keys.call(call_id),
                "stream": keys.run_stream(run_id),
                "lease": keys.lease(call_id),
                "cancel": keys.cancel(call_id),
                "running": keys.running,
                "queued": keys.queued,
                **emit_keys(keys),
            },
            argv={
                "call_id": call_id,
                "token": token,
                "lease_ms": lease_ms,
                "now": now,
                "maxlen": maxlen,
                "cancel_result": cancel_result,
                "now_ms": now_ms,
                "run_id": run_id,
            },
        )

    def parse(self, reply: Any) -> StartReply:
        """The typed outcome of a reply."""
        kind: StartOutcome = outcome(StartOutcome, reply[0], self)
        if kind == "ok":
            return StartReply(kind, as_text(reply[1]), int(reply[2]))
        return StartReply(kind, status=as_text(reply[1]) if len(reply) > 1 else None)


FinishOutcome = Literal["ok", "stale"]


class Finish(Script[FinishOutcome]):
    """A running call's final state and event (``finish.lua``); ``stale``: it was lost.

    A call of unknown outcome is settled by the runner that lost it, should its handler end
    on its own (``settles``).
    """

    file = "finish.lua"
    outcomes = get_args(FinishOutcome)
    includes = ("emit", "sched")

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
        tool: str = "",
        bucket: str = "",
        duration_us: int = 0,
        settles: bool = False,
    ) -> Invocation[FinishOutcome]:
        """An invocation: KEYS and ARGV as the header of ``finish.lua`` lists them."""
        return self.invoke(
            keys={
                "call": keys.call(call_id),
                "stream": keys.run_stream(run_id),
                "lease": keys.lease(call_id),
                "running": keys.running,
                "undo": keys.undo(call_id),
                **emit_keys(keys),
                "durations": keys.metrics_durations,
                "unknown": keys.unknown,
            },
            argv={
                "call_id": call_id,
                "token": token,
                "status": status,
                "result": result,
                "etype": etype,
                "data": data,
                "maxlen": maxlen,
                "now": now,
                "ttl": ttl,
                "undo_data": undo,
                "undo_ttl": undo_ttl,
                "run_id": run_id,
                "bucket_field": f"{tool}|le|{bucket}" if bucket else "",
                "sum_field": f"{tool}|sum_us",
                "duration_us": duration_us,
                "settles": flag(settles),
            },
        )


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
            keys={"call": keys.call(call_id), "stream": keys.run_stream(run_id), **emit_keys(keys)},
            argv={
                "call_id": call_id,
                "token": token,
                "etype": etype,
                "data": data,
                "maxlen": maxlen,
                "now": now,
                "run_id": run_id,
            },
        )


class Renew(Script[bool]):
    """A lease extended if this token still holds it (``renew.lua``): call or undo lease."""

    file = "renew.lua"
    includes = ("sched",)

    def __call__(
        self,
        *,
        lease: str,
        running: str,
        call_id: str,
        token: str,
        lease_ms: int,
        now_ms: int,
        record: str | None = None,
    ) -> Invocation[bool]:
        """An invocation: KEYS and ARGV as the header of ``renew.lua`` lists them.

        ``record``: the call's record, whose slots are renewed with its lease (an undo's
        lease has none).
        """
        return self.invoke(
            keys={"lease": lease, "running": running, "call": record or lease},
            argv={
                "call_id": call_id,
                "token": token,
                "lease_ms": lease_ms,
                "now_ms": now_ms,
                "slots": flag(bool(record)),
            },
        )

    def parse(self, reply: Any) -> bool:
        """The typed outcome of a reply."""
        return bool(reply)


TransitionOutcome = Literal["ok", "conflict", "missing"]


TransitionReply = Reply[TransitionOutcome]
"""``ok`` (value: the event id), ``conflict`` (the status found) or ``missing``."""


class Transition(Script[TransitionReply]):
    """The generic compare-and-set of a call's status with its event (``transition.lua``)."""

    file = "transition.lua"
    outcomes = get_args(TransitionOutcome)
    includes = ("emit", "sched", "park")

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
        tenant: str = DEFAULT_TENANT,
    ) -> Invocation[TransitionReply]:
        """An invocation: KEYS and ARGV as the header of ``transition.lua`` lists them."""
        return self.invoke(
            keys={
                "call": keys.call(call_id),
                "stream": keys.run_stream(run_id),
                "pending_approvals": keys.pending_approvals,
                "unsent": keys.unsent,
                "running": keys.running,
                **emit_keys(keys),
                "parked": keys.parked,
                "tenant_parked": keys.tenant_parked(tenant),
            },
            argv={
                "call_id": call_id,
                "from_states": from_states,
                "to_status": to_status,
                "etype": etype,
                "data": data,
                "maxlen": maxlen,
                "now": now,
                "ttl": ttl,
                "result": result,
                "run_id": run_id,
            },
            extra_argv=pairs(fields),
        )

    def parse(self, reply: Any) -> TransitionReply:
        """The outcome word and the value after it."""
        return self.reply(reply)


RecoverOutcome = Literal["requeue", "failed", "unknown", "timeout", "alive", "gone"]


class Recover(Script[RecoverOutcome]):
    """A running call whose lease expired: requeued, failed or unknown (``recover.lua``)."""

    file = "recover.lua"
    outcomes = get_args(RecoverOutcome)
    includes = ("emit", "sched")

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
        unknown_result: str,
    ) -> Invocation[RecoverOutcome]:
        """An invocation: KEYS and ARGV as the header of ``recover.lua`` lists them."""
        return self.invoke(
            keys={
                "call": keys.call(call_id),
                "lease": keys.lease(call_id),
                "running": keys.running,
                "stream": keys.run_stream(run_id),
                "unsent": keys.unsent,
                **emit_keys(keys),
                "unknown": keys.unknown,
            },
            argv={
                "call_id": call_id,
                "now": now,
                "maxlen": maxlen,
                "ttl": ttl,
                "max_recoveries": max_recoveries,
                "lost_result": lost_result,
                "timeout_result": timeout_result,
                "run_id": run_id,
                "unknown_result": unknown_result,
            },
        )


class Resend(Script[bool]):
    """The sweeper's re-send of a call still queued (``resend.lua``); True if pushed."""

    file = "resend.lua"
    includes = ("push",)

    def __call__(
        self, *, keys: Keys, call_id: str, queue: str, message: str, now: str
    ) -> Invocation[bool]:
        """An invocation: KEYS and ARGV as the header of the script's file lists them."""
        return self.invoke(
            keys={
                "call": keys.call(call_id),
                **push_keys(keys, queue),
                **self.marks(keys, call_id),
            },
            argv={"call_id": call_id, "message": message, "now": now},
        )

    def marks(self, keys: Keys, call_id: str) -> dict[str, str]:
        """The KEYS after the push's: the pushed index, and the suspicion mark it clears."""
        return {
            "queued": keys.queued,
            "unsent": keys.unsent,
            "suspect": keys.lost_suspect(call_id),
        }

    def parse(self, reply: Any) -> bool:
        """The typed outcome of a reply."""
        return bool(int(reply))


class GiveBack(Script[int]):
    """Calls a busy worker has not started, out again in one message (``give_back.lua``)."""

    file = "give_back.lua"
    includes = ("push",)

    def __call__(
        self,
        *,
        keys: Keys,
        queue: str,
        message: str,
        call_ids: Sequence[str],
        now: str,
        unless_waiting: bool = False,
    ) -> Invocation[int]:
        """An invocation: KEYS and ARGV as the header of ``give_back.lua`` lists them."""
        return self.invoke(
            keys={**push_keys(keys, queue), "queued": keys.queued},
            argv={"message": message, "now": now, "unless_waiting": "1" if unless_waiting else ""},
            extra_keys=[keys.call(c) for c in call_ids],
            extra_argv=call_ids,
        )

    def parse(self, reply: Any) -> int:
        """How many calls were given back; -1: none, the queue holds a message (unless_waiting)."""
        return int(reply)


LinkRetryOutcome = Literal["linked", "gone"]


LinkRetryReply = Reply[LinkRetryOutcome]
"""``linked``: the winning retry's call id; ``gone``: the retried call's record left Redis."""


class LinkRetry(Script[LinkRetryReply]):
    """A retry and the call it retries, linked both ways while both are in Redis."""

    file = "link_retry.lua"
    outcomes = get_args(LinkRetryOutcome)

    def __call__(self, *, keys: Keys, old_id: str, new_id: str) -> Invocation[LinkRetryReply]:
        """An invocation: KEYS and ARGV as the header of ``link_retry.lua`` lists them."""
        return self.invoke(
            keys={"old": keys.call(old_id), "new": keys.call(new_id)},
            argv={"old_id": old_id, "new_id": new_id},
        )

    def parse(self, reply: Any) -> LinkRetryReply:
        """The outcome word and the value after it."""
        return self.reply(reply)


CREATE = Create()
CREATE_GROUP = CreateGroup()
START = Start()
FINISH = Finish()
PROGRESS = Progress()
RENEW = Renew()
TRANSITION = Transition()
RECOVER = Recover()
RESEND = Resend()
GIVE_BACK = GiveBack()
LINK_RETRY = LinkRetry()
