"""``CallStore``: call records in Redis, changed only through the atomic scripts."""

from __future__ import annotations

import bisect
import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import redis

from toolq.errors import (
    CallCancelledError,
    CallNotFoundError,
    OutcomeUnknownError,
    PayloadError,
    ToolTimeoutError,
    WorkerLostError,
)
from toolq.keys import Keys
from toolq.models import (
    FINAL_EVENT_OF,
    FINAL_STATUSES,
    CallEnvelope,
    CallResult,
    CallStatus,
    EventType,
    PreviewState,
    RiskLevel,
)
from toolq.quotas import DEFAULT_TENANT
from toolq.results import scripts
from toolq.results.cold import ColdStore
from toolq.results.connection import as_text
from toolq.results.owners import RunOwner
from toolq.results.paging import DEFAULT_LIMIT, Cursor, Page, check_limit
from toolq.results.replication import ReplicaAcks
from toolq.results.runner import Invocation, Scripts
from toolq.settings import Settings

DURATION_BUCKETS_MS = (5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000)
"""Upper bounds of the execution-time histogram's buckets (``toolq_call_duration_ms``)."""
_BUCKET_NAMES = (*(str(b) for b in DURATION_BUCKETS_MS), "+Inf")


def duration_bucket(duration_ms: float | None) -> tuple[str, int]:
    """The histogram bucket of a call's execution time and that time in microseconds.

    The bucket is its bound (``+Inf`` past the last); ``("", 0)`` when the call did not run.
    """
    if duration_ms is None:
        return "", 0
    i = bisect.bisect_left(DURATION_BUCKETS_MS, duration_ms)
    return _BUCKET_NAMES[i], int(duration_ms * 1000)


RECENT_CALLS = 10_000
"""How many of the newest calls the recent-calls index (dashboard, metrics) keeps."""
OUTPUT_IN_EVENT_LIMIT = 4096
"""Outputs up to this many bytes of JSON ride along in the final event; larger ones don't."""


_FINAL_VALUES = frozenset(s.value for s in FINAL_STATUSES)

_COMPACT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=str)
"""The encoder ``dumps`` uses, built once: ``json.dumps`` given options builds one a call."""


def dumps(value: Any) -> str:
    """Compact JSON used for everything toolq writes to Redis."""
    return _COMPACT.encode(value)


UNKNOWN_RESULT = {
    "error": "the worker running this call was lost mid-call and the tool is not safe to run "
    "twice, so whether it took effect is unknown; a person is checking and will record the "
    "outcome. Do not repeat the call meanwhile.",
    "error_type": OutcomeUnknownError.code,
}
"""The result of a call in state ``unknown``: what the model reads until it is resolved."""


@dataclass(frozen=True)
class Parking:
    """What a parked call's record keeps for its deciders, besides its ``deadline``."""

    digest: str
    """Of the arguments as stored (secrets sealed), which never change."""
    approval_metadata: str = ""
    """The tool's approval metadata (JSON; ``""``: none)."""
    preview: bool = False
    """The tool has a preview: the call's is pending until a worker renders it."""


@dataclass(frozen=True)
class Scheduled:
    """A call that goes through admission (``Admission.plan``): its backlog, lane and fields.

    Once queued it waits in its backlog with its message, and ADMIT pushes it.
    """

    backlog: str
    lane: str
    fields: Mapping[str, str]
    """The record fields admission reads (lane, backlog, weight, tenant, limits)."""

    @property
    def slots(self) -> tuple[str, str]:
        """``(backlog, lane)``, as CREATE and CREATE_GROUP take them."""
        return self.backlog, self.lane

    @property
    def limited(self) -> bool:
        """The call has limits of its own (its message carries it alone)."""
        return "limits" in self.fields


@dataclass(frozen=True)
class NewCall:
    """A call to create: its envelope, first state, first event and tool facts."""

    envelope: CallEnvelope
    status: CallStatus
    event: EventType
    event_data: dict[str, Any]
    idempotent: bool = False
    timeout: float | None = None
    result: dict[str, Any] | None = None
    deadline: float | None = None
    idempotency_key: str = ""
    message: tuple[str, str] | None = None
    """``(queue, message)`` pushed with the record when the call is created queued."""
    admin: bool = False
    """The submitter is an admin: it may add calls to a run another principal owns."""
    charge: scripts.Charge | None = None
    """The call's cost against its tenant's budget, charged (or refused) with its creation."""
    schedule: Scheduled | None = None
    """Set for a call that goes through admission."""
    fingerprint: str = ""
    """The call's tool and arguments, claimed with its idempotency key
    (``toolq.dispatch.conflicts``); ``""``: a reuse of the key is never a conflict."""
    parking: Parking | None = None
    """Set for a call created parked (awaiting approval)."""
    approval: str = ""
    """The signed loosening rule a queued gated call runs by (JSON; ``""``: none)."""
    notify: str = ""
    """The inbox stream its final event is copied to (``Keys.wait_inbox``; ``""``: none)."""

    def record_fields(self) -> dict[str, str]:
        """The record's fields besides those CREATE writes from its own ARGV."""
        fields: dict[str, str] = {}
        if self.parking is not None:
            fields.update(
                digest=self.parking.digest,
                deadline=repr(self.deadline),
                approval_metadata=self.parking.approval_metadata,
            )
            if self.parking.preview:
                fields["preview_state"] = PreviewState.PENDING.value
        if self.approval:
            fields["approval"] = self.approval
        if self.schedule is not None:
            fields.update(self.schedule.fields)
        return fields


@dataclass(frozen=True)
class MessageGroup:
    """Calls (positions in ``create_many``'s list) created with one message carrying them."""

    members: tuple[int, ...]
    queue: str
    message: str
    schedule: tuple[str, str] | None = None
    """``(backlog, lane)`` of a group of scheduled calls: backlogged, not pushed."""


@dataclass(frozen=True)
class Started:
    """What ``start`` tells a worker: run it (with the envelope), or why not."""

    outcome: scripts.StartOutcome | Literal["unconfirmed"]
    envelope: CallEnvelope | None = None
    attempt: int = 0
    status: str | None = None


def result_payload(result: CallResult) -> dict[str, Any]:
    """The outcome fields of a result, as stored (identity comes from the envelope)."""
    payload = result.model_dump(
        mode="json",
        include={"output", "error", "error_type", "artifacts", "duration_ms", "attempts"},
        exclude_defaults=True,
    )
    if result.content:
        # Dumped whole: excluding defaults would drop each block's ``type`` tag.
        payload["content"] = [block.model_dump(mode="json") for block in result.content]
    return payload


TOOLQ_ENDINGS = frozenset({ToolTimeoutError.code, CallCancelledError.code, WorkerLostError.code})
"""Error types of a call toolq ended (its time limit, a cancel, a lost worker), not its tool."""


def ended_on_its_own(result: CallResult) -> bool:
    """Whether the handler ended on its own: returned, or raised (or reported) its own error.

    Only such an outcome tells whether a call lost with its lease had its effect (FINISH's
    ``settles``); one toolq caused (the time limit, a cancel) does not.
    """
    if result.status is CallStatus.SUCCEEDED:
        return True
    return result.status is CallStatus.FAILED and result.error_type not in TOOLQ_ENDINGS


def final_event_data(status: CallStatus, payload: dict[str, Any]) -> dict[str, Any]:
    """Data of a final event: status, error, duration, and the output when it is small."""
    data: dict[str, Any] = {"status": status.value}
    for key in ("error", "error_type", "duration_ms", "attempts"):
        if key in payload:
            data[key] = payload[key]
    complete = not payload.get("content") and not payload.get("artifacts")
    if "output" in payload:
        encoded = dumps(payload["output"])
        if len(encoded) <= OUTPUT_IN_EVENT_LIMIT:
            data["output"] = payload["output"]
        else:
            data["output_truncated"] = True
            complete = False
    if complete:
        data["complete"] = True  # the event alone gives the whole result
    return data


class CallStore:
    """Reads and writes call records, run streams and the recovery sets."""

    def __init__(self, client: redis.Redis, settings: Settings) -> None:
        self.redis = client
        self.settings = settings
        self.keys = Keys(settings.key_prefix)
        self.scripts = Scripts(client)
        """Runs the Lua scripts for this store and the ones built on it (undo, approvals)."""
        self.acks = ReplicaAcks(settings, self.keys)
        """The ``WAIT`` behind each write that accepts, decides, starts or finishes a call."""
        self.cold: ColdStore | None = None
        """The history store the reads fall back on for calls no longer in Redis."""

    @property
    def _maxlen(self) -> int:
        return self.settings.stream_maxlen

    @property
    def _ttl(self) -> int:
        return self.settings.result_ttl

    # -- creation ----------------------------------------------------------------------------

    def create_many(
        self,
        calls: Sequence[NewCall],
        groups: Sequence[MessageGroup] = (),
        admit: Callable[[RiskLevel], Invocation[Any]] | None = None,
    ) -> list[tuple[str, str]]:
        """Create calls in one round trip; one ``(outcome, value)`` per call.

        Each is ``('new', event_id)``, ``('over_budget', event_id)`` (created ``denied``:
        its tenant's budget could not take its cost), ``('dup', call_id)``,
        ``('call_id_conflict', call_id)`` (the key names that call, of another tool or
        arguments: nothing was written) or ``('not_owner', owner)`` (the run belongs to
        another principal or tenant: nothing was written).

        The idempotency key is claimed with the record, so a retried dispatch never creates
        a second call. The members of each group (queued calls) are created by one script
        with the group's message instead of their own (``create_group.lua``). ``admit``
        (``Admission.invocation``) is run in the same pipeline each time about a message's
        worth of calls (``admission_batch``) went into backlogs: workers get the first calls
        while the rest are still being created, as they get direct calls' messages. With
        ``min_replicas_ack`` the same round trip waits for the replicas (``ReplicationError``
        when too few confirm).
        """
        k = self.keys
        now = repr(time.time())
        # The last call of each run sets the run's TTLs, once for the whole dispatch.
        last = {call.envelope.run_id: i for i, call in enumerate(calls)}
        invocations: list[Invocation[Any]] = []
        creates: list[int] = []  # where each span's script is in ``invocations``
        backlogged: list[RiskLevel] = []  # of the scheduled calls created since an ADMIT
        spans = _spans(len(calls), groups)
        for n, (span, in_span) in enumerate(spans, 1):
            creates.append(len(invocations))
            if not groups:
                i = span.start
                invocations.append(self._create(calls[i], now, last[calls[i].envelope.run_id] == i))
            else:
                # With groups, every call goes through CREATE_GROUP: one script for all the
                # creates, so a NOSCRIPT retry (Redis lost its scripts) reruns them all, in
                # order (an ADMIT between them that ran is not rerun: the caller admits after).
                invocations.append(self._create_group(calls, span, in_span, now, last))
            if admit is None:
                continue
            backlogged.extend(calls[i].envelope.risk for i in span if calls[i].schedule)
            if len(backlogged) >= self.settings.admission_batch and n < len(spans):
                invocations.extend(admit(risk) for risk in sorted(set(backlogged)))
                backlogged.clear()
        trim = ("ZREMRANGEBYRANK", k.recent_calls, 0, -RECENT_CALLS - 1)
        replies, (_, *acked) = self.scripts.pooled_after(invocations, [trim, *self.acks.commands()])
        if acked:
            self.acks.check(acked[-1], f"dispatch of {len(calls)} call(s)")
        found: list[scripts.CreateReply] = []
        for position in creates:
            reply = replies[position]
            found.extend(reply if isinstance(reply, list) else [reply])
        return [(reply.outcome, reply.value) for reply in found]

    def _create_group(
        self,
        calls: Sequence[NewCall],
        span: range,
        in_span: Sequence[MessageGroup],
        now: str,
        last: dict[str, int],
    ) -> Invocation[list[scripts.CreateReply]]:
        """CREATE_GROUP of the calls at ``span``, with the messages of its groups."""
        number = {i: n for n, g in enumerate(in_span, 1) for i in g.members}
        members = [
            (
                calls[i].envelope.call_id,
                number.get(i, 0),
                self._create(
                    calls[i],
                    now,
                    last[calls[i].envelope.run_id] == i,
                    with_message=i not in number,
                ),
            )
            for i in span
        ]
        return scripts.CREATE_GROUP(
            keys=self.keys,
            now=now,
            messages=[(g.queue, g.message) for g in in_span],
            members=members,
            schedules=[g.schedule for g in in_span],
        )

    def _create(
        self, call: NewCall, now: str, refresh: bool, *, with_message: bool = True
    ) -> Invocation[scripts.CreateReply]:
        env = call.envelope
        return scripts.CREATE(
            keys=self.keys,
            idempotency=self.keys.idempotency(
                env.principal, env.run_id, call.idempotency_key or env.call_id
            ),
            call_id=env.call_id,
            run_id=env.run_id,
            status=call.status.value,
            envelope=env.model_dump_json(),
            etype=call.event.value,
            data=dumps(call.event_data),
            maxlen=self._maxlen,
            ttl=self._ttl,
            now=now,
            deadline=repr(call.deadline or 0),
            name=env.name,
            risk=env.risk.value,
            idempotent=call.idempotent,
            timeout="" if call.timeout is None else repr(call.timeout),
            result=dumps(call.result) if call.result is not None else "",
            message=call.message if with_message else None,
            grouped=not with_message,
            notify=call.notify,
            owner=RunOwner.of(env.principal, env.tenant).encode(),
            admin=call.admin,
            refresh=refresh,
            tenant=env.tenant,
            charge=call.charge,
            fields=call.record_fields(),
            schedule=call.schedule.slots if call.schedule else None,
            fingerprint=call.fingerprint,
        )

    def mark_sent(self, call_ids: Iterable[str]) -> None:
        """Forget calls that reached the broker (the sweeper re-sends the others)."""
        ids = list(call_ids)
        if ids:
            self.redis.zrem(self.keys.unsent, *ids)

    def resend_many(self, messages: Sequence[tuple[str, str, str]]) -> int:
        """Push ``(call_id, queue, message)`` for the calls still queued; how many were pushed.

        The status check and the push are one script, so a call that started meanwhile is
        not sent again; the push is recorded as at creation (``resend.lua``).
        """
        if not messages:
            return 0
        now = repr(time.time())
        pushed = self.scripts.pipelined(
            [
                scripts.RESEND(keys=self.keys, call_id=c, queue=queue, message=message, now=now)
                for c, queue, message in messages
            ]
        )
        return sum(pushed)

    # -- worker side -------------------------------------------------------------------------

    def give_back(
        self, queue: str, message: str, call_ids: Sequence[str], unless_waiting: bool = False
    ) -> int:
        """Push ``message`` for the calls among ``call_ids`` still queued; how many.

        A busy worker's calls it has not started (``give_back.lua``): the push is recorded
        on each as at creation, so a lost message is sent again. ``unless_waiting``: push
        nothing while ``queue`` holds a message (-1).
        """
        return self.scripts.run(
            scripts.GIVE_BACK(
                keys=self.keys,
                queue=queue,
                message=message,
                call_ids=call_ids,
                now=repr(time.time()),
                unless_waiting=unless_waiting,
            )
        )

    def start(
        self, call_id: str, token: str, cancelled: dict[str, Any], run_id: str | None = None
    ) -> Started:
        """Take the execution lease and move ``queued`` → ``running``, atomically.

        ``run_id`` comes with the message (saving a lookup) and must match the record.
        """
        run_id = run_id or self.run_id(call_id)
        if run_id is None:
            return Started("missing")
        return self.commit([], [(call_id, run_id, token)], cancelled)[1][0]

    def _start(
        self, call_id: str, run_id: str, token: str, cancel_result: str, now: float
    ) -> Invocation[scripts.StartReply]:
        return scripts.START(
            keys=self.keys,
            call_id=call_id,
            run_id=run_id,
            token=token,
            lease_ms=int(self.settings.lease_seconds * 1000),
            now=repr(now),
            maxlen=self._maxlen,
            cancel_result=cancel_result,
            now_ms=int(now * 1000),
        )

    def progress(
        self, envelope: CallEnvelope, token: str, etype: EventType, data: dict[str, Any]
    ) -> bool:
        """Append a non-final event of a running call (progress, retrying)."""
        return self.progress_many([(envelope, token, etype, dumps(data))])[0]

    def progress_many(
        self, events: Sequence[tuple[CallEnvelope, str, EventType, str]]
    ) -> list[bool]:
        """``progress`` of several events (of any calls), in order, in one round trip.

        Each event's data comes as JSON (``dumps``), encoded when the call reported it.
        """
        invocations = [self._progress(*event) for event in events]
        outcomes, _ = self.scripts.direct_many(invocations, ())
        return [outcome == "ok" for outcome in outcomes]

    def _progress(
        self, envelope: CallEnvelope, token: str, etype: EventType, data: str
    ) -> Invocation[scripts.ProgressOutcome]:
        return scripts.PROGRESS(
            keys=self.keys,
            call_id=envelope.call_id,
            run_id=envelope.run_id,
            token=token,
            etype=etype.value,
            data=data,
            maxlen=self._maxlen,
            now=repr(time.time()),
        )

    def finish(self, envelope: CallEnvelope, token: str, result: CallResult) -> bool:
        """Write the final state and its event; False if this runner lost the call.

        Repeating it with the same token answers as the first time did (safe to retry).
        """
        return self.commit([(envelope, token, result)], [], {})[0][0]

    def commit(
        self,
        finished: Sequence[tuple[CallEnvelope, str, CallResult]],
        starts: Sequence[tuple[str, str, str]],
        cancelled: dict[str, Any],
        after: Sequence[tuple[Any, ...]] = (),
    ) -> tuple[list[bool], list[Started]]:
        """``finish`` and ``start`` of several calls in one round trip (the thread's connection).

        ``finished``: ``(envelope, token, result)``; ``starts``: ``(call_id, run_id, token)``;
        ``after``: commands sent behind the scripts, in the same round trip (their replies
        are not looked at).

        Each call gets its own answer, exactly as from ``finish`` or ``start``, and each is
        safe to repeat alone with the same token. With ``min_replicas_ack``, one ``WAIT``
        follows them all (``ReplicationError`` when the replicas do not confirm a write).
        """
        now, cancel_result = time.time(), dumps(cancelled)
        invocations: list[Invocation[Any]] = [self._finish(*item) for item in finished]
        invocations += [
            self._start(call_id, run_id, token, cancel_result, now)
            for call_id, run_id, token in starts
        ]
        replies, tail = self.scripts.direct_many(invocations, [*after, *self.acks.commands()])
        acked = tail[len(after) :]
        held = [outcome == "ok" for outcome in replies[: len(finished)]]
        started = [_started(reply) for reply in replies[len(finished) :]]
        if acked and (any(held) or any(s.outcome == "ok" for s in started)):
            what = f"{len(finished)} final state(s) and {len(starts)} start(s)"
            self.acks.check(acked[-1], what)
        return held, started

    def _finish(
        self, envelope: CallEnvelope, token: str, result: CallResult
    ) -> Invocation[scripts.FinishOutcome]:
        payload = result_payload(result)
        bucket, duration_us = duration_bucket(result.duration_ms)
        return scripts.FINISH(
            keys=self.keys,
            call_id=envelope.call_id,
            run_id=envelope.run_id,
            token=token,
            status=result.status.value,
            result=dumps(payload),
            etype=FINAL_EVENT_OF[result.status].value,
            data=dumps(final_event_data(result.status, payload)),
            maxlen=self._maxlen,
            now=repr(time.time()),
            ttl=self._ttl,
            undo=dumps(result.undo) if result.undo else "",
            undo_ttl=self.settings.undo_ttl,
            tool=envelope.name,
            bucket=bucket,
            duration_us=duration_us,
            settles=ended_on_its_own(result),
        )

    def parked_unknown(self, leases: dict[str, str]) -> set[str]:
        """The calls among lost ``leases`` (call id → token) parked as unknown under that token.

        Nobody runs such a call again without a person: its lost runner may go on, and its
        handler's own outcome settles it (``finish.lua``).
        """
        ids = list(leases)
        if not ids:
            return set()
        pipe = self.redis.pipeline(transaction=False)
        for call_id in ids:
            pipe.hmget(self.keys.call(call_id), "status", "lost_token")
        return {
            call_id
            for call_id, (status, lost) in zip(ids, pipe.execute(), strict=True)
            if status is not None
            and as_text(status) == CallStatus.UNKNOWN.value
            and lost is not None
            and as_text(lost) == leases[call_id]
        }

    def renew(self, leases: dict[str, str]) -> dict[str, bool]:
        """Extend the leases of running calls (call id → token); which ones are still ours."""
        k = self.keys
        now_ms = int(time.time() * 1000)
        lease_ms = int(self.settings.lease_seconds * 1000)
        ids = list(leases)
        renewed = self.scripts.pipelined(
            [
                scripts.RENEW(
                    lease=k.lease(call_id),
                    running=k.running,
                    call_id=call_id,
                    token=leases[call_id],
                    lease_ms=lease_ms,
                    now_ms=now_ms,
                    record=k.call(call_id),
                )
                for call_id in ids
            ]
        )
        return dict(zip(ids, renewed, strict=True))

    def cancel_requested(self, call_ids: Sequence[str]) -> list[str]:
        """The calls among ``call_ids`` whose durable cancel flag is set."""
        if not call_ids:
            return []
        pipe = self.redis.pipeline(transaction=False)
        for call_id in call_ids:
            pipe.exists(self.keys.cancel(call_id))
        return [c for c, flag in zip(call_ids, pipe.execute(), strict=True) if flag]

    def emit(
        self,
        call_id: str,
        event: EventType,
        data: dict[str, Any],
        fields: dict[str, str] | None = None,
        delete: Sequence[str] = (),
    ) -> str:
        """Append an event that changes no state, with record fields set in the same MULTI."""
        run_id = self.run_id(call_id)
        if run_id is None:
            raise CallNotFoundError(f"unknown call id {call_id!r}", call_id=call_id)
        k = self.keys
        pipe = self.redis.pipeline(transaction=True)
        if fields:
            pipe.hset(k.call(call_id), mapping=dict[Any, Any](fields))
        if delete:
            pipe.delete(*delete)
        pipe.xadd(
            k.run_stream(run_id),
            {"type": event.value, "call_id": call_id, "ts": repr(time.time()), "data": dumps(data)},
            maxlen=self._maxlen,
            approximate=True,
        )
        replies = pipe.execute()
        return as_text(replies[-1])

    # -- state changes from outside the worker ------------------------------------------------

    def transition(
        self,
        call_id: str,
        *,
        from_states: Iterable[CallStatus] | str,
        to: CallStatus,
        event: EventType,
        data: dict[str, Any],
        result: dict[str, Any] | None = None,
        fields: dict[str, str] | None = None,
    ) -> tuple[bool, str]:
        """Compare-and-set a call's state; ``(True, event_id)`` or ``(False, current_status)``."""
        run_id, tenant = self.run_and_tenant(call_id)
        if run_id is None:
            raise CallNotFoundError(f"unknown call id {call_id!r}", call_id=call_id)
        allowed = (
            from_states if isinstance(from_states, str) else ",".join(s.value for s in from_states)
        )
        reply = self.scripts.run(
            scripts.TRANSITION(
                keys=self.keys,
                call_id=call_id,
                run_id=run_id,
                from_states=allowed,
                to_status=to.value,
                etype=event.value,
                data=dumps(data),
                maxlen=self._maxlen,
                now=repr(time.time()),
                ttl=self._ttl,
                result=dumps(result) if result is not None else "",
                fields=fields,
                tenant=tenant,
            )
        )
        if reply.outcome == "missing":
            raise CallNotFoundError(f"unknown call id {call_id!r}", call_id=call_id)
        return reply.outcome == "ok", reply.value

    def recover(self, call_id: str, max_recoveries: int) -> scripts.RecoverOutcome:
        """Handle a running call whose lease expired: ``requeue``, ``failed``, ``timeout``, ..."""
        run_id = self.run_id(call_id)
        k = self.keys
        if run_id is None:
            self.redis.zrem(k.running, call_id)
            return "gone"
        lost = {
            "error": "worker lost during execution; the tool is idempotent but was already "
            "run again as often as allowed",
            "error_type": WorkerLostError.code,
        }
        timed_out = {
            "error": "the tool exceeded its time limit and its worker process was killed",
            "error_type": ToolTimeoutError.code,
        }
        return self.scripts.run(
            scripts.RECOVER(
                keys=k,
                call_id=call_id,
                run_id=run_id,
                now=repr(time.time()),
                maxlen=self._maxlen,
                ttl=self._ttl,
                max_recoveries=max_recoveries,
                lost_result=dumps(lost),
                timeout_result=dumps(timed_out),
                unknown_result=dumps(UNKNOWN_RESULT),
            )
        )

    # -- reading -----------------------------------------------------------------------------

    def run_id(self, call_id: str) -> str | None:
        """The run a call belongs to, or ``None`` for an unknown call."""
        value = self.redis.hget(self.keys.call(call_id), "run_id")
        if value is None:
            record = self._cold([call_id]).get(call_id)
            return record.get("run_id") if record else None
        return as_text(value)

    def run_and_tenant(self, call_id: str) -> tuple[str | None, str]:
        """A call's run (``None``: an unknown call) and tenant (``default`` before tenants)."""
        run_id, tenant = self.redis.hmget(self.keys.call(call_id), "run_id", "tenant")
        if run_id is None and (record := self._cold([call_id]).get(call_id)):
            return record.get("run_id"), record.get("tenant") or DEFAULT_TENANT
        return (
            as_text(run_id) if run_id is not None else None,
            as_text(tenant) if tenant else DEFAULT_TENANT,
        )

    def records(
        self, call_ids: Sequence[str], *, confirm: bool = True
    ) -> list[dict[str, str] | None]:
        """Raw records of many calls in one round trip (``None`` for unknown ids).

        A call no longer in Redis is read from the history store, if there is one. With
        ``min_replicas_ack`` (and ``confirm``) the read carries a fence (``ReplicaAcks``),
        and a final state the replicas do not hold is not reported: ``ReplicationError``.
        """
        records, held, replies = self._fenced_records(call_ids, confirm)
        if not held:  # (a record from the history store is durable: only Redis's count)
            for call_id, raw, record in zip(call_ids, replies, records, strict=False):
                if raw and record is not None and record.get("status") in _FINAL_VALUES:
                    raise self.acks.unconfirmed(f"call {call_id}'s state", replies)
        return records

    def _fenced_records(
        self, call_ids: Sequence[str], fence: bool
    ) -> tuple[list[dict[str, str] | None], bool, list[Any]]:
        """The records, whether the replicas hold them (True unfenced), and the replies.

        The records and the fence go in one pipeline on one connection, so the fence is the
        read's: replication is one ordered stream, and replicas that acknowledge the mark
        hold every state read before it. A fence sent on its own could reach another master
        than the read did (a client's commands are retried on the new master through a
        failover) and vouch for states that master never had.
        """
        pipe = self.redis.pipeline(transaction=False)
        for call_id in call_ids:
            pipe.hgetall(self.keys.call(call_id))
        fenced = fence and bool(call_ids) and self.acks.fence(pipe)
        replies = pipe.execute()
        records = self._decoded(call_ids, replies[: len(call_ids)])
        return records, not fenced or self.acks.held(replies), replies

    def _decoded(
        self, call_ids: Sequence[str], replies: Sequence[Any]
    ) -> list[dict[str, str] | None]:
        """``HGETALL`` replies of ``call_ids``' records as text; the gone ones from history."""
        out: list[dict[str, str] | None] = []
        for raw in replies:
            out.append({as_text(a): as_text(b) for a, b in raw.items()} if raw else None)
        gone = [c for c, record in zip(call_ids, out, strict=True) if record is None]
        if gone and (found := self._cold(gone)):
            out = [
                found.get(c) if record is None else record
                for c, record in zip(call_ids, out, strict=True)
            ]
        return out

    def _cold(self, call_ids: Sequence[str]) -> dict[str, dict[str, str]]:
        """The archived records of ``call_ids`` (none without a history store)."""
        return self.cold.records(call_ids) if self.cold is not None and call_ids else {}

    def statuses(self, call_ids: Sequence[str], *, confirm: bool = True) -> list[CallStatus | None]:
        """Current states of many calls in one round trip (archived ones from history).

        Fenced as ``records`` is (unless not ``confirm``): a final state the replicas do not
        hold is not reported.
        """
        pipe = self.redis.pipeline(transaction=False)
        for call_id in call_ids:
            pipe.hget(self.keys.call(call_id), "status")
        fenced = confirm and bool(call_ids) and self.acks.fence(pipe)
        replies = pipe.execute()
        found = [as_text(s) if s is not None else None for s in replies[: len(call_ids)]]
        if fenced and not self.acks.held(replies):
            for call_id, status in zip(call_ids, found, strict=True):
                if status in _FINAL_VALUES:
                    raise self.acks.unconfirmed(f"call {call_id}'s state", replies)
        gone = [c for c, s in zip(call_ids, found, strict=True) if s is None]
        if gone and (archived := self._cold(gone)):
            found = [
                archived[c]["status"] if s is None and c in archived else s
                for c, s in zip(call_ids, found, strict=True)
            ]
        return [CallStatus(s) if s is not None else None for s in found]

    def results(self, call_ids: Sequence[str], *, confirm: bool = True) -> list[CallResult]:
        """Current results of many calls; raises ``CallNotFoundError`` for unknown ids.

        Fenced as ``records`` is, unless not ``confirm`` (a wait that confirms them later).
        """
        return _results_of(call_ids, self.records(call_ids, confirm=confirm))

    def confirmed_results(self, call_ids: Sequence[str]) -> tuple[list[CallResult], bool]:
        """Current results of many calls, and whether the replicas hold them.

        A fenced read, as ``records``; without ``min_replicas_ack``: confirmed.
        """
        records, held, _ = self._fenced_records(call_ids, True)
        return _results_of(call_ids, records), held

    def result(self, call_id: str) -> CallResult:
        """Current result of one call."""
        return self.results([call_id])[0]

    def envelope(self, call_id: str) -> CallEnvelope:
        """The stored envelope of a call."""
        raw = self.redis.hget(self.keys.call(call_id), "envelope")
        if raw is None and (record := self._cold([call_id]).get(call_id)):
            raw = record.get("envelope")
        if raw is None:
            raise CallNotFoundError(f"unknown call id {call_id!r}", call_id=call_id)
        return CallEnvelope.model_validate_json(raw)

    def calls_page(
        self, run_id: str, *, limit: int = DEFAULT_LIMIT, cursor: str | None = None
    ) -> Page[CallResult]:
        """A page of a run's calls in dispatch order; the total is the run's call count.

        The cursor is a position in the run's call list, which only grows: calls
        dispatched during a walk come on later pages.
        """
        check_limit(limit)
        start = 0
        if cursor:
            after = Cursor.decode(cursor)
            position = float(after.score)
            if not position.is_integer() or position < 0:
                raise PayloadError(f"invalid cursor {cursor[:60]!r} for a run's calls")
            start = int(position) + 1
        pipe = self.redis.pipeline(transaction=False)
        pipe.lrange(self.keys.run_calls(run_id), start, start + limit)
        pipe.llen(self.keys.run_calls(run_id))
        raw, total = pipe.execute()
        ids = [as_text(c) for c in raw]
        if not total and self.cold is not None:
            archived = self.cold.run_call_ids(run_id)
            ids, total = archived[start : start + limit + 1], len(archived)
        shown = ids[:limit]
        next_cursor = None
        if len(ids) > limit:
            next_cursor = Cursor(str(start + limit - 1), shown[-1]).encode()
        return Page(self.results(shown), next_cursor, int(total))

    def run_call_ids(self, run_id: str) -> list[str]:
        """A run's call ids in dispatch order (from the history store once the run left Redis)."""
        ids = [as_text(c) for c in self.redis.lrange(self.keys.run_calls(run_id), 0, -1)]
        if not ids and self.cold is not None:
            return self.cold.run_call_ids(run_id)
        return ids


def record_to_result(record: dict[str, str]) -> CallResult:
    """A ``CallResult`` from a raw record (envelope + status + stored outcome)."""
    envelope = CallEnvelope.model_validate_json(record["envelope"])
    payload = json.loads(record["result"]) if record.get("result") else {}
    payload.setdefault("attempts", int(record.get("attempt") or 0))
    return CallResult(
        call_id=envelope.call_id,
        tool_call_id=envelope.tool_call_id,
        name=envelope.name,
        status=CallStatus(record["status"]),
        format=envelope.format,
        run_id=envelope.run_id,
        rpc_id=envelope.rpc_id,
        tenant=envelope.tenant,
        retry_of=record.get("retry_of") or None,
        retried_by=record.get("retried_by") or None,
        **payload,
    )


def _started(reply: scripts.StartReply) -> Started:
    """What a START reply tells the worker."""
    if reply.outcome == "ok" and reply.envelope is not None:
        return Started("ok", CallEnvelope.model_validate_json(reply.envelope), reply.attempt)
    return Started(reply.outcome, status=reply.status)


def _spans(count: int, groups: Sequence[MessageGroup]) -> list[tuple[range, list[MessageGroup]]]:
    """Positions ``0..count-1`` cut into runs, in order, each with the groups it holds.

    A run is a lone call (no groups), or the smallest run of consecutive calls that holds
    whole groups. One script creates each run, so calls are created (and listed in their
    run) in dispatch order.
    """
    bounds = sorted(((min(g.members), max(g.members), g) for g in groups), key=lambda b: b[0])
    merged: list[tuple[int, int, list[MessageGroup]]] = []
    for first, last, group in bounds:
        if merged and first <= merged[-1][1]:
            start, end, held = merged[-1]
            merged[-1] = (start, max(end, last), [*held, group])
        else:
            merged.append((first, last, [group]))
    spans: list[tuple[range, list[MessageGroup]]] = []
    position = 0
    for first, last, held in merged:
        spans.extend((range(i, i + 1), []) for i in range(position, first))
        spans.append((range(first, last + 1), held))
        position = last + 1
    spans.extend((range(i, i + 1), []) for i in range(position, count))
    return spans


def _results_of(
    call_ids: Sequence[str], records: Sequence[dict[str, str] | None]
) -> list[CallResult]:
    """The results of ``call_ids``' records; ``CallNotFoundError`` for one that has none."""
    out = []
    for call_id, record in zip(call_ids, records, strict=True):
        if record is None:
            raise CallNotFoundError(f"unknown call id {call_id!r}", call_id=call_id)
        out.append(record_to_result(record))
    return out
