"""``WorkerRuntime``: what the Celery tasks do with call ids, once per process.

One path for one call and many (a lone call is a batch of one): each round trip carries the
FINISH of the calls that ended and the START (lease + ``running``) of the calls that can
start, through the store's atomic scripts, and the process's slots share their round trips
when they coincide (``toolq.workers.commit``). A ``LeaseKeeper`` thread renews leases and
watches cancel flags. A message's calls take the process's slots as they free: synchronous
handlers one at a time on the pool's slot, ``async def`` handlers on the process's one event
loop (``toolq.workers.siblings``) as its ``AsyncSlots`` allow; what a busy slot cannot start
soon goes back to the queue (``toolq.workers.slots``).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import itertools
import json
import logging
import secrets
import threading
import time
import uuid
from collections.abc import Callable, Coroutine, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from typing import Any, TypeVar

import redis

from toolq.approvals.guard import ApprovalGuard
from toolq.approvals.policy import digest_call
from toolq.approvals.resolving import rerun_refusal
from toolq.approvals.store import approvals_of
from toolq.approvals.undoing import undo_refusal
from toolq.backend import Backend
from toolq.broker import acks
from toolq.diff import diff_json, diff_text
from toolq.errors import (
    ApprovalUnverifiedError,
    CallCancelledError,
    InternalError,
    ReplicationError,
    SecretsError,
    UndoError,
)
from toolq.execution.context import ToolContext
from toolq.execution.executor import (
    Executor,
    error_message,
    error_type,
    run_inline,
    runs_async,
)
from toolq.forks import fresh_in_children
from toolq.models import (
    AuditOutcome,
    CallEnvelope,
    CallResult,
    CallStatus,
    EventType,
    PreviewState,
    RiskLevel,
    UndoState,
    jsonable,
)
from toolq.redis_failures import refusal
from toolq.registry.registry import ToolRegistry
from toolq.registry.schema import context_parameter
from toolq.registry.tool import Tool
from toolq.results.admission import Admission
from toolq.results.audit_log import AuditLog
from toolq.results.store import CallStore, Started, dumps
from toolq.results.undos import UndoStore
from toolq.secretbox import SecretBox, open_arguments
from toolq.settings import Settings
from toolq.signing import verifier_for
from toolq.telemetry import CallSpan, call_span
from toolq.workers.commit import Finished, GroupCommit, Starting
from toolq.workers.news import News, NewsWriter
from toolq.workers.readmit import Readmit
from toolq.workers.records import Decision, Gate, Kind, Records, UndoGate
from toolq.workers.siblings import EventLoop
from toolq.workers.slots import (
    AsyncSlots,
    Pending,
    Route,
    Siblings,
    Spiller,
)

log = logging.getLogger("toolq.worker")
T = TypeVar("T")

CANCEL_POLL_SECONDS = 0.2
ASYNC_POLL_SECONDS = 0.05
"""How often a slot waiting on async calls also looks for loop slots freed by other slots."""
CANCELLED_BEFORE_START = {
    "error": "cancelled before it started",
    "error_type": CallCancelledError.code,
}
HOOK_TIMEOUT = 60.0
"""Longest a preview or undo handler may take (seconds)."""
REFUSED_FIRST_PAUSE = 0.2
REFUSED_LONGEST_PAUSE = 5.0
"""Seconds between attempts of a write Redis refuses (full, read-only): doubling from the
first up to the longest (and never past a third of a lease: the leases are renewed then)."""


class _LeaseTokens:
    """Lease tokens unique to this process: a random prefix and a count.

    A token tells one execution of a call from another (a stale runner's ``FINISH`` is
    refused); it is no secret (the call's record shows it to any Redis client), only unique.
    One ``os.urandom`` per process (and per forked child, which gets a prefix of its own)
    instead of one per call.
    """

    def __init__(self) -> None:
        self.after_fork()
        fresh_in_children(self)

    def after_fork(self) -> None:
        """A new prefix and count (at start, and in a forked child)."""
        self._prefix = secrets.token_hex(12)
        self._count = itertools.count()

    def __call__(self) -> str:
        return f"{self._prefix}{next(self._count):08x}"


lease_token = _LeaseTokens()
"""A new lease token (``START`` writes it in the record and the lease)."""


class LeaseKeeper(threading.Thread):
    """Renews the leases of this process's running calls and delivers cancels to them."""

    def __init__(self, store: CallStore, settings: Settings, undos: UndoStore) -> None:
        super().__init__(name="toolq-lease-keeper", daemon=True)
        self.store = store
        self.undos = undos
        self.renew_every = settings.lease_seconds / 3
        self._active: dict[str, tuple[str, ToolContext]] = {}
        self._undoing: dict[str, str] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = False

    def stop(self) -> None:
        """End the thread after its current round (in-process test workers close runtimes)."""
        self._stopping = True
        self._wake.set()

    def add(self, call_id: str, token: str, ctx: ToolContext) -> None:
        """Watch a call that just started."""
        with self._lock:
            self._active[call_id] = (token, ctx)

    def remove(self, call_id: str) -> None:
        """Stop watching a call."""
        with self._lock:
            self._active.pop(call_id, None)

    def add_undo(self, call_id: str, token: str) -> None:
        """Renew the undo lease of a call whose undo handler just started."""
        with self._lock:
            self._undoing[call_id] = token

    def remove_undo(self, call_id: str) -> None:
        """Stop renewing an undo lease."""
        with self._lock:
            self._undoing.pop(call_id, None)

    def run(self) -> None:
        """Poll cancel flags and renew leases until the process exits."""
        last_renew = time.monotonic()
        while not self._stopping:
            self._wake.wait(min(CANCEL_POLL_SECONDS, self.renew_every))
            with self._lock:
                active = dict(self._active)
                undoing = dict(self._undoing)
            if not active and not undoing:
                continue
            try:
                for call_id in self.store.cancel_requested(list(active)):
                    active[call_id][1].cancel()
                if time.monotonic() - last_renew >= self.renew_every:
                    last_renew = time.monotonic()
                    held = self.store.renew({c: token for c, (token, _) in active.items()})
                    lost = {c: active[c][0] for c, ok in held.items() if not ok}
                    # Parked as unknown under our token (this worker was away: hung, cut
                    # off): nobody runs it again without a person, and the handler's own
                    # outcome settles it. Any other lost call may run elsewhere: stop ours.
                    parked = self.store.parked_unknown(lost)
                    for call_id in lost:
                        if call_id in parked:
                            log.warning(
                                "lease of call %s lost; it waits as unknown: this run goes on "
                                "and its outcome will settle it",
                                call_id,
                            )
                            self.remove(call_id)
                        else:
                            log.warning("lease of call %s lost; cancelling this run", call_id)
                            active[call_id][1].cancel()
                    for call_id, ok in self.undos.renew(undoing).items():
                        if not ok:
                            # An undo handler cannot be stopped; its end will be dropped.
                            log.warning("undo lease of call %s lost", call_id)
            except redis.RedisError as exc:
                log.warning("lease keeper cannot reach Redis: %s", exc)


class WorkerRuntime:
    """Runs calls by id in one worker process."""

    def __init__(
        self,
        settings: Settings,
        registry: ToolRegistry,
        *,
        backend: Backend | None = None,
        async_slots: int | None = None,
        siblings: Siblings | None = None,
    ) -> None:
        """Run ``registry``'s calls over ``backend``, or a new ``Backend(settings, registry)``.

        ``async_slots``: the ``async def`` calls this process may run at once (default
        ``Settings.async_concurrency``; a prefork worker's processes share it out).
        ``siblings``: the worker's slots, for a busy one to hand waiting calls to idle ones
        soon (``Spiller``).
        """
        backend = backend or Backend(settings, registry)
        self.settings = settings
        self.registry = registry
        self.redis = backend.redis
        self.store = backend.store
        self.audit_log = AuditLog(
            self.redis, self.store.keys, settings.audit_maxlen, self.store.scripts
        )
        self.executor = Executor(
            registry,
            default_timeout=settings.default_timeout,
            retry_backoff=settings.retry_backoff,
            retry_backoff_max=settings.retry_backoff_max,
        )
        verifier = verifier_for(settings)
        self.verifier = verifier
        self.guard = ApprovalGuard(settings, verifier) if verifier else None
        self.box = SecretBox.from_settings(settings)
        self.undos = backend.undos
        self.keeper = LeaseKeeper(self.store, settings, self.undos)
        self.keeper.start()
        self.readmit = Readmit(lambda risks: self.admission.admit_soon(risks))
        self.readmit.start()
        self.admission = Admission(self.store, on_due=self.readmit.at)
        self.publisher = backend.publisher
        self._loops = threading.local()
        self.event_loop = EventLoop()
        """Runs a batch's ``async def`` calls: one loop for the whole process."""
        self.async_slots = AsyncSlots(async_slots or settings.async_concurrency)
        """How many ``async def`` calls this process runs at once."""
        self._async_tools = {tool.name for tool in registry.list() if runs_async(tool)}
        self._all_async = len(self._async_tools) == len(registry.list())
        self.siblings = siblings
        self.spiller = Spiller(self.give_back, siblings.idle if siblings is not None else None)
        self.spiller.start()
        self.records = Records(self.redis, self.store.keys)
        self.commits = GroupCommit(self.store, CANCELLED_BEFORE_START)
        """Every START and FINISH of the process: its slots' together when they coincide."""
        self.news = NewsWriter(
            lambda batch: self.store.progress_many(
                [(n.envelope, n.token, n.etype, n.data) for n in batch]
            )
        )
        """The ``async def`` calls' progress and retrying events, written off the loop."""

    def close(self) -> None:
        """Stop the lease keeper and close the Redis client (a worker process just exits)."""
        self.keeper.stop()
        self.keeper.join(5)
        self.spiller.stop()
        self.spiller.join(5)
        self.readmit.stop()
        self.readmit.join(5)
        self.event_loop.close()
        self.news.stop()
        self.redis.close()

    def release_thread(self) -> None:
        """Close the calling thread's event loop (a thread that stops running calls)."""
        loop: asyncio.AbstractEventLoop | None = getattr(self._loops, "loop", None)
        if loop is not None and not loop.is_closed():
            loop.close()
        self._loops.loop = None

    def _loop(self) -> asyncio.AbstractEventLoop:
        loop: asyncio.AbstractEventLoop | None = getattr(self._loops, "loop", None)
        if loop is None or loop.is_closed():
            loop = asyncio.new_event_loop()
            self._loops.loop = loop
        return loop

    def run(self, call_id: str, run_id: str | None = None, ack: str | None = None) -> None:
        """Run one call if it is still queued: a batch of one (``run_many``).

        A message of an earlier client may carry no run id: it is read from the record.
        """
        run_id = run_id or self.store.run_id(call_id)
        if run_id is None:
            log.info("call %s not run: missing", call_id)
            return
        self.run_many([(call_id, run_id)], ack=ack)

    def run_many(
        self,
        calls: Sequence[tuple[str, str]],
        route: Route | None = None,
        kinds: dict[str, bool] | None = None,
        ack: str | None = None,
    ) -> None:
        """Run a message's ``(call_id, run_id)`` calls as slots free; return when all end.

        Synchronous calls run one after the other on this thread (the pool's slot);
        ``async def`` calls on the process's event loop, as its ``AsyncSlots`` allow. Each
        round trip carries the FINISH of every call that ended and the START of every call
        that can start now (``_commit``): a lone call is a START, its run and a FINISH. Each
        call runs under its own lease with its own events (a call not queued any more, say
        final after a redelivery, is skipped). With a ``route`` (a message from the broker),
        the calls not started while this slot is busy too long go out again for another slot
        (``Pending.give_back_at``, ``Spiller``). ``kinds``: which calls are ``async def``
        ones, as the message says (else read here when the registry has both kinds).
        ``ack``: the message's delivery tag, when this process acknowledges it: its entry in
        kombu's ``unacked`` goes behind the last FINISH (``toolq.broker.acks``).
        """
        if kinds is None:
            kinds = self._kinds([call_id for call_id, _ in calls])
        pending = Pending(calls, route, kinds)
        if self.siblings is not None:
            self.siblings.enter()
        if route is not None and len(calls) > 1:
            self.spiller.watch(pending)
        on_loop: dict[Future[CallResult], tuple[CallEnvelope, str]] = {}
        ended: list[Finished] = []
        try:
            while True:
                starts = self._next(pending, kinds)
                ended += self._ended(on_loop, 0)
                if not starts and not on_loop and not len(pending) and pending.giving():
                    # What a give-back in flight hands back starts with these FINISHes; else
                    # they are the message's last, and its ack goes with them.
                    pending.wait_given()
                    continue
                if not starts and not ended:
                    if on_loop:
                        ended += self._ended(on_loop, ASYNC_POLL_SECONDS)
                    elif len(pending):  # async calls waiting for the loop's slots to free
                        self.async_slots.wait(ASYNC_POLL_SECONDS)
                    else:
                        break
                    continue
                if starts:
                    pending.busy()
                last = not starts and not on_loop and not len(pending)
                try:
                    started = self._commit(
                        ended, [(c, r, t) for c, r, t, _ in starts], ack if last else None
                    )
                except BaseException:  # not started here: their loop slots are free again
                    self.async_slots.release(sum(1 for *_, on_the_loop in starts if on_the_loop))
                    raise
                ended = []
                ready: list[tuple[CallEnvelope, str, int]] = []
                sync: list[tuple[CallEnvelope, str, int]] = []
                for (call_id, _, token, on_the_loop), got in zip(starts, started, strict=True):
                    if got.outcome != "ok" or got.envelope is None:
                        log.info("call %s not run: %s %s", call_id, got.outcome, got.status or "")
                        if on_the_loop:
                            self.async_slots.release()
                    elif on_the_loop and got.envelope.name in self._async_tools:
                        ready.append((got.envelope, token, got.attempt))
                    else:  # synchronous (taken on the loop, it was a lone call's guess: _kinds)
                        if on_the_loop:
                            self.async_slots.release()
                        sync.append((got.envelope, token, got.attempt))
                if ready:  # the coroutines reach the loop together: one wake-up of its thread
                    coros = [self._run_async(*call) for call in ready]
                    futures = self.event_loop.submit_many(coros)
                    for future, (env, token, _) in zip(futures, ready, strict=True):
                        on_loop[future] = (env, token)
                if sync:  # the calls behind wait from now, not from before the START
                    pending.busy()
                for env, token, attempt in sync:  # one, unless a message's kinds were wrong
                    ended.append((env, token, self._run_sync(env, token, attempt)))
        finally:
            if self.siblings is not None:
                self.siblings.leave()
            pending.close()
            self._unwatch(ended)  # only if this thread broke: their leases lapse
            if on_loop:  # only if this thread broke: let them end on their own
                log.warning("slot left %d async call(s) running", len(on_loop))
                for future, (env, _) in on_loop.items():
                    future.add_done_callback(self._unwatch_when_done(env.call_id))

    def _next(self, pending: Pending, kinds: dict[str, bool]) -> list[tuple[str, str, str, bool]]:
        """The calls to start now, taken out of ``pending``: ``(call_id, run_id, token, async)``.

        The next synchronous one (this slot runs one at a time) and the async ones the
        loop has slots for.
        """
        starts: list[tuple[str, str, str, bool]] = []
        sync = pending.take(lambda call: not kinds.get(call[0], False))
        if sync is not None:
            starts.append((*sync, lease_token(), False))
        if not kinds or not len(pending):
            return starts

        def is_async(call: tuple[str, str]) -> bool:
            return kinds.get(call[0], False)

        got = self.async_slots.try_acquire(pending.count(is_async))
        if got:
            calls = pending.take_many(is_async, got)
            self.async_slots.release(got - len(calls))
            starts += [(*call, lease_token(), True) for call in calls]
        return starts

    def _ended(
        self, on_loop: dict[Future[CallResult], tuple[CallEnvelope, str]], timeout: float
    ) -> list[Finished]:
        """The async calls that ended (waiting up to ``timeout`` for one), their slots freed."""
        if not on_loop:
            return []
        done, _ = wait(on_loop, timeout=timeout, return_when=FIRST_COMPLETED)
        ended = [(*on_loop.pop(f), f.result()) for f in done]
        self.async_slots.release(len(ended))
        return ended

    def _kinds(self, call_ids: Sequence[str]) -> dict[str, bool]:
        """Which of ``call_ids`` are ``async def`` calls; ``{}`` when the registry has none.

        Only a registry with both kinds needs a look at the records (one round trip), and
        not for a lone call while the loop has a free slot: it is taken as an async one and
        its START's envelope says which it is (a synchronous one gives the slot back and
        runs on this slot; should another thread take the free slot first, it waits for one).
        """
        if not self._async_tools:
            return {}
        if self._all_async or (len(call_ids) == 1 and self.async_slots.free() > 0):
            return dict.fromkeys(call_ids, True)
        # an earlier client's message, or a lone call's while the loop is full
        kinds = self.records.read_many(call_ids, Kind)
        return {
            call_id: kind.name in self._async_tools
            for call_id, kind in zip(call_ids, kinds, strict=True)
        }

    def give_back(self, pending: Pending, most: int | None = None, parts: int = 1) -> None:
        """Send the calls ``pending`` still holds out again (``Spiller``).

        ``most``: only that many, the last ones, in ``parts`` messages of about as many calls
        each, one for each idle slot of the worker, and only onto an empty queue (behind
        waiting messages they would wait longer than on their slot); ``None``: all of them,
        in one message. Calls not sent go back to the slot (``Pending.settle``).
        """
        calls = pending.take_to_give(most)
        if not calls:
            return
        back: list[tuple[str, str]] = calls
        try:
            if pending.route is None:
                return
            parts = max(1, min(parts, len(calls)))
            size, extra = divmod(len(calls), parts)
            chunks, at = [], 0
            for i in range(parts):
                chunks.append(calls[at : at + size + (1 if i < extra else 0)])
                at += len(chunks[-1])
            for i, chunk in enumerate(chunks):
                marked = [(c, r, "async" if pending.kinds.get(c) else "sync") for c, r in chunk]
                queue, message = self.publisher.batch_message(
                    marked, pending.route.risk, pending.route.timeout
                )
                ids = [call_id for call_id, _ in chunk]
                try:
                    given = self.store.give_back(queue, message, ids, most is not None)
                except redis.RedisError as exc:
                    log.info("could not give back %d call(s), running them here: %s", len(ids), exc)
                    return
                if given < 0:  # the queue holds messages: the slot keeps them
                    return
                back = [call for rest in chunks[i + 1 :] for call in rest]
                log.debug("gave back %d call(s) of a busy slot", given)
        finally:
            pending.settle(back, last=most is not None)

    async def _run_async(self, env: CallEnvelope, token: str, execution: int) -> CallResult:
        """A batch's call, on an event loop: its result, never an error.

        Its approval check (gated calls: one read, and the audit entry of a refusal) reaches
        Redis from the loop's thread, briefly holding up the other coroutines; its progress
        and retrying events go through the process's ``NewsWriter``, which the loop does not
        wait for.
        """
        try:
            with call_span(env, execution) as span:
                if span.recording:
                    self._trace_approval(env, span)
                tool = self.registry.get(env.name)
                if tool is None:  # listing an upstream again waits for it: not on the loop
                    loop = asyncio.get_running_loop()
                    tool = await loop.run_in_executor(None, self.registry.find, env.name)
                body = self._body(env, token, execution, span, tool, on_loop=True)
                if isinstance(body, CallResult):
                    result = body
                else:
                    coro, ctx = body
                    # Renewed until its FINISH is written (``_commit``), which may wait for
                    # a synchronous sibling running on the slot's thread.
                    self.keeper.add(env.call_id, token, ctx)
                    try:
                        result = await coro
                    except BaseException as exc:
                        if not isinstance(exc, Exception):  # cancelled with its loop: no FINISH
                            self.keeper.remove(env.call_id)
                        raise
                span.finish(result)
                return result
        except Exception as exc:  # the executor reports failures; this is a toolq bug
            log.exception("executor crashed on call %s", env.call_id)
            return _crashed(env, exc)

    def _commit(
        self, ended: list[Finished], starts: list[Starting], ack: str | None = None
    ) -> list[Started]:
        """FINISH of the calls that ended and START of the next ones: the starts' answers.

        One round trip, shared with the process's other slots when theirs coincide
        (``GroupCommit``). On a failure each part is repeated on its own with the same
        tokens (both answer a repeat as they answered the first): ``_finish``, ``_start``.
        ``ack``: a delivery tag whose ``unacked`` entry goes in the FINISHes' round trip
        (with no START: the message's last calls), behind them. A call's news queued on
        the event loop is written first (``NewsWriter.flush``): no event follows its end.
        """
        held: list[bool] = []
        started: list[Started] = []
        try:
            if ended:
                self.news.flush(env.call_id for env, _, _ in ended)
            if ended and starts:
                try:
                    held, started = self.commits.commit(ended, starts)
                except (
                    redis.ConnectionError,
                    redis.TimeoutError,
                    redis.ResponseError,
                    ReplicationError,
                ) as exc:
                    log.info("retrying finishes and starts apart: %s", exc)
                    held, started = self._finish(ended), self._start(starts)
            elif ended:
                held = self._finish(ended, acks.commands(ack) if ack else ())
                if ack:
                    acks.sent(ack)
            elif starts:
                started = self._start(starts)
        finally:
            self._unwatch(ended)
        for (env, _, result), ok in zip(ended, held, strict=True):
            if not ok:
                log.warning(
                    "call %s finished after losing its lease; result dropped: %s",
                    env.call_id,
                    dumps(result.status),
                )
        self._admit_after([env for env, _, _ in ended])
        return started

    def _unwatch(self, ended: list[Finished]) -> None:
        """Stop renewing the leases of calls that ended (their FINISH written, or given up)."""
        for env, _, _ in ended:
            self.keeper.remove(env.call_id)

    def _unwatch_when_done(self, call_id: str) -> Callable[[Future[CallResult]], None]:
        """A done-callback that stops renewing ``call_id``'s lease (its FINISH never comes)."""
        return lambda _: self.keeper.remove(call_id)

    def _start(self, starts: list[Starting]) -> list[Started]:
        """``START`` of calls, repeated with the same tokens until Redis and replicas confirm.

        The replicas count under ``TOOLQ_MIN_REPLICAS_ACK``; a handler runs only once its
        start would survive a failover. While they are missing the leases taken are renewed
        (recovery leaves the calls alone); when none is held any more, no call is run here.
        """
        while True:
            try:
                # Half a lease per round: the lease set by the first attempt must not lapse.
                return self._within_lease(lambda: self.commits.commit([], starts)[1], share=0.5)
            except ReplicationError as exc:
                held = self.store.renew({call_id: token for call_id, _, token in starts})
                if not any(held.values()):
                    log.warning("calls not run: their start was not confirmed (%s)", exc)
                    return [Started("unconfirmed")] * len(starts)

    def _finish(self, ended: list[Finished], after: Sequence[tuple[Any, ...]] = ()) -> list[bool]:
        """``FINISH`` of calls that ended, retried within their leases; which were still held.

        ``after``: commands sent behind them in the same round trip (safe to repeat).
        """
        leases = {env.call_id: token for env, token, _ in ended}
        return self._within_lease(lambda: self.commits.commit(ended, [], after)[0], held=leases)

    def _trace_approval(self, env: CallEnvelope, span: CallSpan) -> None:
        """Add the approval wait of a call that was parked (only paid for when traced)."""
        decision = self.records.read(env.call_id, Decision)
        approvers = {"approvers": decision.approvers or ""}
        times = [float(a["ts"]) for a in approvals_of(approvers) if "ts" in a]
        if times:
            span.approval_wait(env.created_at, max(times), decision.decided_by or "")

    def _outcome(self, env: CallEnvelope, token: str, execution: int, span: CallSpan) -> CallResult:
        """Decrypt, verify and run a started call on this thread: its result, never an error."""
        tool = self.registry.find(env.name)
        body = self._body(env, token, execution, span, tool)
        if isinstance(body, CallResult):
            return body
        coro, ctx = body
        self.keeper.add(env.call_id, token, ctx)
        try:
            if self.executor.needs_task(env.name, tool):
                return self._loop().run_until_complete(coro)
            return run_inline(coro, self._loop())
        except Exception as exc:  # the executor reports failures; this is a toolq bug
            log.exception("executor crashed on call %s", env.call_id)
            return _crashed(env, exc)
        finally:
            self.keeper.remove(env.call_id)

    def _run_sync(self, env: CallEnvelope, token: str, execution: int) -> CallResult:
        """Run a started synchronous call on this thread, traced: its result."""
        with call_span(env, execution) as span:
            if span.recording:
                self._trace_approval(env, span)
            result = self._outcome(env, token, execution, span)
            span.finish(result)
        return result

    def _body(
        self,
        env: CallEnvelope,
        token: str,
        execution: int,
        span: CallSpan,
        tool: Tool | None,
        *,
        on_loop: bool = False,
    ) -> tuple[Coroutine[Any, Any, CallResult], ToolContext] | CallResult:
        """The executor's run of a started call and its context, or the call's failed result.

        A call fails here, its handler never run, when its secrets do not open or its
        approval does not verify. ``on_loop``: it runs on the process's event loop, where
        its news is queued for the ``NewsWriter`` rather than written while the loop waits.
        """
        news = self._queue_news if on_loop else self._news
        call_id = env.call_id
        # ``tool`` was looked up once (``ToolRegistry.find``, off the event loop): the gate,
        # the secrets and the run are of the same tool, whatever an upstream's list_changed
        # does to the registry meanwhile.
        if tool is None:
            missing = self.registry.not_found(env.name)
            return _failed(env, missing.message, missing.code)
        try:
            # Decrypted here, in memory, just before the handler: never written back.
            arguments = self._plain_arguments(env, tool)
        except SecretsError as exc:
            log.warning("call %s not run: %s", call_id, exc.message)
            return _failed(env, exc.message, exc.code)
        # Gated or not is decided on the plaintext (as the dispatcher's predicate saw it);
        # the signature covers the digest of the tool and arguments as stored (secrets sealed).
        gated = self.guard is not None and self.guard.gated(env, tool, arguments)
        # Started before and lost: its outcome was unknown, and only a person's signed
        # re-run lets it run again (``toolq.approvals.resolving``).
        rerun = execution > 1 and not tool.idempotent
        if gated or rerun:
            # Only these calls pay for this read (one); everything else starts as before.
            gate = self.records.read(call_id, Gate)
            if gated and self.guard is not None:
                reason = self.guard.refusal(env, tool, gate.approval, arguments)
                if reason is not None:
                    return self._refusal(env, reason)
            if rerun:
                digest = digest_call(env.name, env.arguments)
                reason = rerun_refusal(
                    env, tool.risk, digest, execution, gate.resolution, self.verifier
                )
                if reason is not None:
                    return self._refusal(env, reason)

        def progress(data: Any) -> None:
            running = CallStatus.RUNNING.value
            news(env, token, EventType.PROGRESS, {"status": running, "data": data})

        def retrying(attempt: int, delay: float, exc: BaseException) -> None:
            data = {
                "status": CallStatus.RUNNING.value,
                "attempt": attempt,
                "delay": round(delay, 3),
                "error": error_message(exc),
            }
            news(env, token, EventType.RETRYING, data)
            span.retry(attempt, delay, error_message(exc))

        ctx = context_of(env, metadata={"execution": execution}, progress_sink=progress)
        return self.executor.execute(env.name, arguments, ctx, on_retry=retrying, tool=tool), ctx

    def _queue_news(
        self, env: CallEnvelope, token: str, etype: EventType, data: dict[str, Any]
    ) -> None:
        """``_news`` for a call on the event loop: queued for the ``NewsWriter``."""
        self.news.put(News(env, token, etype, dumps(data)))

    def _news(self, env: CallEnvelope, token: str, etype: EventType, data: dict[str, Any]) -> None:
        """Append a running call's news (progress, retrying), or drop it when Redis cannot.

        News is not state: a Redis that refuses writes (full, read-only) or stays away
        longer than the client retries (``RETRY_SECONDS``) loses the event, never the call.
        The call's FINISH waits for Redis within its lease (``_within_lease``).
        """
        try:
            self.store.progress(env, token, etype, data)
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            log.warning("%s event of call %s dropped: %s", etype.value, env.call_id, exc)
        except redis.ResponseError as exc:
            if refusal(exc) is None:
                raise
            log.info("%s event of call %s dropped: %s", etype.value, env.call_id, exc)

    def _refusal(self, env: CallEnvelope, reason: str) -> CallResult:
        """The failed result of a gated call whose approval does not verify (audited)."""
        log.warning("call %s (%s) refused: %s", env.call_id, env.name, reason)
        exc = ApprovalUnverifiedError(
            f"approval unverified: {reason}; the call did not run", call_id=env.call_id
        )
        # Workers hold no signing key: the entry is marked as a system entry.
        self.audit_log.append(
            {
                "call_id": env.call_id,
                "run_id": env.run_id,
                "tool": env.name,
                "by": "worker",
                "outcome": AuditOutcome.refused(exc.code),
                "digest": digest_call(env.name, env.arguments),
                "ts": repr(time.time()),
                "system": "1",
                "reason": reason,
            }
        )
        return _failed(env, exc.message, exc.code)

    def _plain_arguments(self, env: CallEnvelope, tool: Tool) -> dict[str, Any]:
        """The call's arguments with its secrets decrypted."""
        return open_arguments(self.box, tool, env.call_id, env.arguments)

    def _admit_after(self, ended: Sequence[CallEnvelope]) -> None:
        """Admit waiting calls of the risks of scheduled calls that ended (slots freed).

        The sweeper admits them anyway on its next pass: a failure here only delays them.
        """
        risks = [
            env.risk
            for env in ended
            if self.admission.applies(self.registry.get(env.name), env.tenant)
        ]
        if risks:
            self.admission.admit_soon(risks)

    def _within_lease(
        self, write: Callable[[], T], share: float = 1.0, held: dict[str, str] | None = None
    ) -> T:
        """``write()``, retried for ``share`` of a lease while Redis or its replicas fail it.

        Redis may be restarting, failing over or hung (a command that timed out may have
        been done); after a lease the call (or its undo) belongs to recovery. Every write
        retried here answers a repeat with the same token as it answered the first.

        A Redis that refuses writes (full, read-only: ``refusal``) wrote nothing: the write
        is retried, with a growing pause, until Redis takes it, however long that is. The
        ``held`` leases (call id → token) are renewed meanwhile (a full Redis still renews
        them), so no sweeper takes a call whose handler has finished for a lost one.
        """
        deadline = time.monotonic() + self.settings.lease_seconds * share
        pause, longest = REFUSED_FIRST_PAUSE, min(REFUSED_LONGEST_PAUSE, self.keeper.renew_every)
        refused_since: float | None = None
        while True:
            try:
                done = write()
            except (redis.ConnectionError, redis.TimeoutError, ReplicationError) as exc:
                if time.monotonic() > deadline:
                    raise
                log.info("retrying a write: %s", exc)
                time.sleep(0.5)
                continue
            except redis.ResponseError as exc:
                if refusal(exc) is None:
                    raise
                if refused_since is None:
                    refused_since = time.monotonic()
                    log.warning("Redis refuses writes; waiting until it takes them: %s", exc)
                self._renew(held)
                time.sleep(pause)
                pause = min(pause * 2, longest)
                continue
            if refused_since is not None:
                waited = time.monotonic() - refused_since
                log.warning("Redis takes writes again (after %.1f s)", waited)
            return done

    def _renew(self, held: dict[str, str] | None) -> None:
        """Renew ``held`` leases while a write waits (a Redis refusing even that: skipped)."""
        if not held:
            return
        try:
            self.store.renew(held)
        except redis.RedisError as exc:
            log.info("cannot renew leases while waiting: %s", exc)

    # -- approvals and undo ------------------------------------------------------------------

    def _resolve(self, value: Any) -> Any:
        """The value a tool hook (preview, undo) returned, awaited if it is a coroutine."""
        if inspect.isawaitable(value):
            return self._loop().run_until_complete(asyncio.wait_for(_awaited(value), HOOK_TIMEOUT))
        return value

    @contextlib.contextmanager
    def _occupied(self) -> Iterator[None]:
        """Count the slot busy while it runs a preview or an undo, as while it runs a message.

        A busy slot is no idle one to hand a message's waiting calls to (``Siblings``).
        """
        if self.siblings is None:
            yield
            return
        self.siblings.enter()
        try:
            yield
        finally:
            self.siblings.leave()

    def preview(self, call_id: str) -> None:
        """Compute a parked call's preview (and diff) before approvers look at it."""
        with self._occupied():
            self._preview(call_id)

    def _preview(self, call_id: str) -> None:
        envelope = self.store.envelope(call_id)
        tool = self.registry.require(envelope.name)
        ctx = context_of(envelope)
        fields: dict[str, str]
        try:
            arguments = tool.validate(self._plain_arguments(envelope, tool))
            shown = jsonable(self._resolve(tool.call_method("preview", arguments, ctx)))
            fields = {"preview_state": PreviewState.READY.value, "preview": dumps(shown)}
            diff = diff_of(shown)
            if diff is not None:
                fields["diff"] = dumps(diff)
            parked = CallStatus.AWAITING_APPROVAL.value
            data: dict[str, Any] = {"status": parked, "preview": PreviewState.READY.value}
        except Exception as exc:
            log.warning("preview of call %s failed: %s", call_id, exc)
            fields = {
                "preview_state": PreviewState.FAILED.value,
                "preview_error": error_message(exc),
            }
            data = {
                "status": CallStatus.AWAITING_APPROVAL.value,
                "preview": PreviewState.FAILED.value,
                "error": error_message(exc),
            }
        self.store.emit(call_id, EventType.PREVIEWED, data, fields)

    def undo(self, call_id: str) -> None:
        """Run the tool's undo handler with the undo data its call returned, if requested.

        The undo lease is taken first (requested → undoing): any other delivery of the same
        undo (a re-sent copy, a duplicate, a forged message) finds it taken and does nothing.
        """
        with self._occupied():
            self._undo(call_id)

    def _undo_refusal(self, envelope: CallEnvelope, tool: Tool, raw: bytes | str) -> str | None:
        """Why this gated call's undo handler must not run (None: it may, or is not gated).

        Gated by the worker's own view, as a call is (``ApprovalGuard``): a DANGEROUS tool,
        or one the default policy parks for these arguments. Such an undo runs only for a
        call whose own approval holds (a Redis writer's undo of a call nobody approved is
        refused even when an approver asks), and with a person's signed approval over this
        call and this undo data (``undo_refusal``), by as many distinct approvers as the
        tool's calls need. Without verify keys nothing is checked, as for calls.
        """
        if self.guard is None or self.verifier is None:
            return None
        arguments = self._plain_arguments(envelope, tool)
        if tool.risk is not RiskLevel.DANGEROUS and not self.guard.gated(envelope, tool, arguments):
            return None
        gate = self.records.read(envelope.call_id, UndoGate)
        # the call ran (by a rule young then): its rule's age is no reason to keep its effect
        reason = self.guard.refusal(envelope, tool, gate.approval, arguments, starting=False)
        if reason is not None:
            return f"its call was not approved: {reason}"
        digest = digest_call(envelope.name, envelope.arguments)
        # as many distinct approvers as the tool's calls need (the worker's own setting)
        required = self.settings.dangerous_approvals if tool.risk is RiskLevel.DANGEROUS else 1
        return undo_refusal(
            envelope,
            tool.risk,
            digest,
            raw,
            gate.undo_approval,
            self.verifier,
            required,
            self.settings.undo_approval_seconds,
        )

    def _undo(self, call_id: str) -> None:
        token = uuid.uuid4().hex
        outcome, state = self._within_lease(lambda: self.undos.start(call_id, token))
        if outcome != "ok":
            log.info("undo of call %s not run: %s %s", call_id, outcome, state)
            return
        envelope = self.store.envelope(call_id)
        self.keeper.add_undo(call_id, token)
        try:
            raw = self.redis.get(self.store.keys.undo(call_id))
            if raw is None:
                raise UndoError(f"call {call_id} has no undo data (expired or never stored)")
            tool = self.registry.require(envelope.name)
            if not tool.has_undo:
                raise UndoError(f"tool {tool.name!r} has no undo handler")
            if (reason := self._undo_refusal(envelope, tool, raw)) is not None:
                log.warning("undo of call %s refused: %s", call_id, reason)
                raise UndoError(f"not run: {reason}")
            name = context_parameter(tool.undo)
            ctx = context_of(envelope)
            self._resolve(tool.undo(json.loads(raw), **({name: ctx} if name else {})))
        except Exception as exc:
            log.warning("undo of call %s failed: %s", call_id, exc)
            end = UndoState.FAILED
            data: dict[str, Any] = {"error": error_message(exc), "error_type": error_type(exc)}
        else:
            end, data = UndoState.UNDONE, {"undone": True}
        finally:
            self.keeper.remove_undo(call_id)
        if not self._within_lease(
            lambda: self.undos.finish(call_id, envelope.run_id, token, end, data)
        ):
            log.warning("undo of call %s ended after losing its lease: %s dropped", call_id, end)


def _failed(env: CallEnvelope, error: str, error_type: str) -> CallResult:
    """A failed result for a call that was never handed to its handler."""
    return CallResult(
        call_id=env.call_id,
        tool_call_id=env.tool_call_id,
        name=env.name,
        status=CallStatus.FAILED,
        error=error,
        error_type=error_type,
    )


def _crashed(env: CallEnvelope, exc: Exception) -> CallResult:
    """The failed result of a call whose run broke inside toolq."""
    return CallResult(
        call_id=env.call_id,
        tool_call_id=env.tool_call_id,
        name=env.name,
        status=CallStatus.FAILED,
        error=error_message(exc),
        error_type=InternalError.code,
    )


def context_of(envelope: CallEnvelope, **extra: Any) -> ToolContext:
    """A ``ToolContext`` for a stored call."""
    return ToolContext(
        call_id=envelope.call_id,
        run_id=envelope.run_id,
        tool_call_id=envelope.tool_call_id,
        tool_name=envelope.name,
        behavior=envelope.behavior,
        principal=envelope.principal,
        tenant=envelope.tenant,
        **extra,
    )


async def _awaited(value: Any) -> Any:
    return await value


def diff_of(preview: Any) -> dict[str, Any] | None:
    """A diff when a preview describes a change: ``{"before": ..., "after": ...}``.

    Text gives a unified diff; JSON documents give an RFC 6902 patch.
    """
    if not isinstance(preview, dict) or "before" not in preview or "after" not in preview:
        return None
    before, after = preview["before"], preview["after"]
    if isinstance(before, str | None) and isinstance(after, str | None):
        name = str(preview.get("path") or "content").lstrip("/")
        return diff_text(
            before or "", after or "", fromfile=f"a/{name}", tofile=f"b/{name}"
        ).to_dict()
    if isinstance(before, dict | list | None) and isinstance(after, dict | list | None):
        return diff_json(before, after).to_dict()
    return None
