"""``Maintenance``: the worker's background duties, so users run no extra process.

Heartbeat (for ``toolq check`` and metrics), recovery of calls whose worker died,
re-sending calls that were queued or approved but never reached the broker or whose
message the broker lost, and expiring overdue approvals. Every step is a compare-and-set,
so several workers sweeping at once cannot do harm; a short lock just keeps them from
doing the same work twice.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import redis

from toolq.approvals.store import ApprovalStore
from toolq.backend import Backend
from toolq.broker import BATCH_TASK_NAME, TASK_NAME, UNDO_TASK_NAME, Publisher, unacked
from toolq.models import CallStatus, RiskLevel, UndoState
from toolq.redis_failures import store_error
from toolq.results.admission import Admission
from toolq.results.connection import as_text
from toolq.results.store import CallStore
from toolq.results.undos import UndoStore
from toolq.workers.heartbeat import beat, live_workers, withdraw
from toolq.workers.readmit import Readmit

if TYPE_CHECKING:
    from toolq.history.archiver import ArchiverThread
    from toolq.webhooks.deliverer import WebhookDeliverer
    from toolq.webhooks.sink import Sink

log = logging.getLogger("toolq.maintenance")

MAX_RECOVERIES = 3
"""Re-runs of an idempotent call after worker loss before it is failed for good."""
UNSENT_GRACE = 5.0
"""Seconds a call may sit in the unsent set (approved, re-queued) before it is re-sent."""
SWEEP_BATCH = 500
LOST_CONFIRM = 1.0
"""Seconds a message must stay missing before its call is re-sent: far above the moment
between kombu's ``BRPOP`` and its ``unacked`` write, so a message in that step is not
mistaken for a lost one."""


@dataclass(frozen=True)
class _Pushes:
    """Where one kind of message (a call's, an undo's) keeps its push bookkeeping."""

    index: str
    suspect: Callable[[str], str]
    state: str
    waiting: str
    seq: str
    tag: str


class Sweeper:
    """One sweep over the recovery sets; used by workers and ``toolq dev``."""

    def __init__(self, store: CallStore, publisher: Publisher, approvals: ApprovalStore) -> None:
        self.store = store
        self.publisher = publisher
        self.approvals = approvals
        self.keys = store.keys
        self.redis = store.redis
        self.undos = UndoStore(store)
        self.admission = Admission(store)
        k = self.keys
        self._call_pushes = _Pushes(
            k.queued, k.lost_suspect, "status", CallStatus.QUEUED.value, "push_seq", "push_tag"
        )
        self._undo_pushes = _Pushes(
            k.undo_queued,
            k.lost_undo_suspect,
            "undo_state",
            UndoState.REQUESTED.value,
            "undo_push_seq",
            "undo_push_tag",
        )

    def sweep(self) -> dict[str, int]:
        """Expire overdue approvals, recover dead workers' calls, re-send unsent ones."""
        counts: dict[str, int] = {}
        now = time.time()
        counts["expired"] = self.approvals.expire_due(now)
        overdue: Any = self.redis.zrangebyscore(
            self.keys.running, 0, int(now * 1000), start=0, num=SWEEP_BATCH
        )
        requeued = []
        for raw in overdue:
            call_id = as_text(raw)
            outcome = self.store.recover(call_id, MAX_RECOVERIES)
            counts[outcome] = counts.get(outcome, 0) + 1
            if outcome != "alive":
                log.warning("call %s lost its worker: %s", call_id, outcome)
            if outcome == "requeue":
                requeued.append(call_id)
        self.resend(requeued)  # at once, not after the unsent grace
        unsent: Any = self.redis.zrangebyscore(
            self.keys.unsent, 0, now - UNSENT_GRACE, start=0, num=SWEEP_BATCH
        )
        ids = [as_text(c) for c in unsent]
        counts["resent"] = self.resend(ids)
        counts["stranded"] = self.resend_stranded(now)
        counts["lost"] = self.resend_lost(now)
        counts["undo_worker_lost"] = self.recover_undos(now)
        counts["undo_lost"] = self.resend_lost_undos(now)
        # throttle windows ending, holds lapsed, calls requeued into their backlogs
        counts["admitted"] = self.admission.admit()
        return counts

    def resend_stranded(self, now: float) -> int:
        """Send again calls (and undos) whose message a worker took but never started.

        kombu keeps a taken, unacknowledged message in its ``unacked`` hash until the
        visibility timeout (above the longest time limit: an hour by default). A message
        that has sat there past ``redeliver_after`` while its call is still ``queued`` (an
        undo message: its undo still ``requested``) is sent again, once per message; of a
        batch message, each call still queued is sent again alone, once.
        A call that a live worker's heartbeat names as held (prefetched behind the calls it
        runs) is left alone: its message is not lost, only waiting, and a copy would be an
        extra message, an extra delivery and a ``not run`` line. Were it sent anyway (a
        heartbeat older than the message), the copy is harmless: the first delivery to
        start the call (or claim the undo) wins, and any other finds it no longer queued.
        """
        cutoff = now - self.store.settings.redeliver_after
        # A batch message's calls are looked at (and re-sent) one by one, each marked once
        # under its message's tag and its own id.
        taken = [
            (tag if d.task != BATCH_TASK_NAME else f"{tag}:{call_id}", (task, call_id))
            for tag, d in unacked.taken_before(self.redis, cutoff, SWEEP_BATCH)
            if d.task in (TASK_NAME, BATCH_TASK_NAME, UNDO_TASK_NAME)
            for task, call_id in ((TASK_NAME if d.task == BATCH_TASK_NAME else d.task, c)
                                  for c in d.call_ids)
        ]  # fmt: skip
        if not taken:
            return 0
        pipe = self.redis.pipeline(transaction=False)
        for _, (_, call_id) in taken:
            pipe.hmget(self.keys.call(call_id), "status", "undo_state")
        # Still waiting for this message: its call queued, or (an undo's) its undo requested.
        stranded = [
            (tag, task, call_id)
            for (tag, (task, call_id)), (status, undo_state) in zip(
                taken, pipe.execute(), strict=True
            )
            if as_text((status if task == TASK_NAME else undo_state) or b"")
            == (CallStatus.QUEUED.value if task == TASK_NAME else UndoState.REQUESTED.value)
        ]
        if stranded:
            held = {c for w in live_workers(self.store.settings, self.redis)
                    for c in w.get("held", [])}  # fmt: skip
            stranded = [(tag, task, c) for tag, task, c in stranded if c not in held]
        if not stranded:
            return 0
        ttl = int(self.store.settings.max_time_limit + 3600)
        pipe = self.redis.pipeline(transaction=False)
        for tag, _, _ in stranded:
            pipe.set(self.keys.resent(tag), "1", nx=True, ex=ttl)
        fresh = [(t, c) for (_, t, c), first in zip(stranded, pipe.execute(), strict=True) if first]
        if fresh:
            # Calls, not messages: a message may carry several, some of them started (those
            # the lease recovery settles) and these never.
            log.warning("re-sending %d queued calls (or undos) a worker took in a message "
                        "but never started: a killed or stopped worker", len(fresh))  # fmt: skip
        calls = [c for t, c in fresh if t == TASK_NAME]
        undos = [c for t, c in fresh if t == UNDO_TASK_NAME]
        return self.resend(calls) + self.resend_undos(undos)

    def recover_undos(self, now: float) -> int:
        """Settle undos whose worker died (undo lease expired): failed, or re-sent if idempotent.

        An undo handler is not assumed idempotent: it fails ``worker_lost`` and is never
        run twice unless its tool is marked ``idempotent`` (then it is requested again, up
        to ``MAX_RECOVERIES`` times), as for calls.
        """
        overdue: Any = self.redis.zrangebyscore(
            self.keys.undoing, 0, int(now * 1000), start=0, num=SWEEP_BATCH
        )
        if not overdue:
            return 0
        ids = [as_text(c) for c in overdue]
        pipe = self.redis.pipeline(transaction=False)
        for call_id in ids:
            pipe.hmget(self.keys.call(call_id), "run_id", "risk")
        settled = 0
        for call_id, (run, risk) in zip(ids, pipe.execute(), strict=True):
            if run is None or risk is None:
                self.redis.zrem(self.keys.undoing, call_id)
                continue
            queue, message = self.publisher.undo_message(call_id, RiskLevel(as_text(risk)))
            outcome = self.undos.recover(call_id, as_text(run), queue, message, MAX_RECOVERIES)
            if outcome in ("failed", "requeue"):
                log.warning("undo of call %s lost its worker: %s", call_id, outcome)
                settled += 1
        return settled

    def resend_undos(self, call_ids: list[str]) -> int:
        """Push again the undo messages of the calls among ``call_ids`` still requested."""
        if not call_ids:
            return 0
        pipe = self.redis.pipeline(transaction=False)
        for call_id in call_ids:
            pipe.hget(self.keys.call(call_id), "risk")
        messages = []
        for call_id, risk in zip(call_ids, pipe.execute(), strict=True):
            if risk is not None:
                queue, message = self.publisher.undo_message(call_id, RiskLevel(as_text(risk)))
                messages.append((call_id, queue, message))
        return self.undos.resend(messages)

    def resend_lost(self, now: float) -> int:
        """Send again queued calls whose message is in no queue and in no unacked entry.

        kombu's ``BRPOP`` takes a message off its queue and a second command records it
        in ``unacked``; a consumer (or Redis, replaying its AOF) dying in between loses it.
        Each push of a call's message gets the next sequence number of its queue
        (``push_seq``). Queues are FIFO (``LPUSH``, ``BRPOP`` from the other end), so while
        the message is still queued, every message pushed after it is queued too: the
        queue is at least ``pushes - push_seq + 1`` long. A shorter queue proves the
        message was taken. Taken and not in ``unacked`` under its delivery tag, on two
        sweeps at least ``LOST_CONFIRM`` apart, while the call stays ``queued``: it is
        lost and sent again. Only calls queued longer than ``redeliver_after`` are looked
        at, from the ``queued`` index that START empties, and never by scanning a queue.
        """
        lost = self._find_lost(now, self._call_pushes)
        for call_id, waited in lost:
            # The chaos harness reads these lines: how long a lost message stranded its call.
            log.warning(
                "call %s: message lost %.2f s after it was queued; sending it again",
                call_id,
                waited,
            )
        return self.resend([call_id for call_id, _ in lost])

    def resend_lost_undos(self, now: float) -> int:
        """Send again requested undos whose message is lost, found as ``resend_lost`` does.

        Undo messages share their queue's push counter with call messages
        (``undo_push_seq``, ``undo_push_tag``, the ``undo_queued`` index UNDO_START empties).
        """
        lost = self._find_lost(now, self._undo_pushes)
        for call_id, waited in lost:
            log.warning(
                "call %s: undo message lost %.2f s after it was requested; sending it again",
                call_id,
                waited,
            )
        return self.resend_undos([call_id for call_id, _ in lost])

    def _find_lost(self, now: float, pushes: _Pushes) -> list[tuple[str, float]]:
        """Messages of ``pushes``' kind taken and never recorded: ``(call_id, seconds)``."""
        k = self.keys
        index = pushes.index
        cutoff = now - self.store.settings.redeliver_after
        raw: Any = self.redis.zrangebyscore(
            index, 0, cutoff, start=0, num=SWEEP_BATCH, withscores=True
        )
        if not raw:
            return []
        pushed_at = {as_text(c): float(score) for c, score in raw}
        ids = list(pushed_at)
        pipe = self.redis.pipeline(transaction=False)
        for call_id in ids:
            pipe.hmget(k.call(call_id), pushes.state, "risk", pushes.seq, pushes.tag)
        waiting: list[tuple[str, str, int, str]] = []
        done: list[str] = []
        for call_id, (state, risk, seq, tag) in zip(ids, pipe.execute(), strict=True):
            if state is None or as_text(state) != pushes.waiting or seq is None:
                done.append(call_id)
            else:
                waiting.append((call_id, k.queue_for(as_text(risk)), int(seq), as_text(tag or b"")))
        if done:
            self.redis.zrem(index, *done)
        if not waiting:
            return []
        suspect_key = pushes.suspect
        queues = sorted({queue for _, queue, _, _ in waiting})
        # The push counter is read before the queue's length: pushes in between only make
        # the queue look longer, never a queued message look taken.
        pipe = self.redis.pipeline(transaction=True)
        for queue in queues:
            pipe.get(k.queue_pushes(queue))
            pipe.llen(queue)
        for call_id, _, _, tag in waiting:
            unacked.queue_holds(pipe, tag)
            pipe.get(suspect_key(call_id))
        replies = pipe.execute()
        taken_below = {
            queue: int(replies[2 * i] or 0) - int(replies[2 * i + 1])
            for i, queue in enumerate(queues)
        }
        rest = replies[2 * len(queues) :]
        confirmed: list[tuple[str, float]] = []
        pipe = self.redis.pipeline(transaction=False)
        ttl = max(60, int(self.store.settings.redeliver_after * 10))
        for n, (call_id, queue, seq, _) in enumerate(waiting):
            held, suspect = rest[2 * n], rest[2 * n + 1]
            if seq > taken_below[queue] or held:
                pipe.delete(suspect_key(call_id))  # queued, or held by a worker
            elif suspect is None:
                pipe.set(suspect_key(call_id), repr(now), nx=True, ex=ttl)
            elif now - float(suspect) >= LOST_CONFIRM:
                confirmed.append((call_id, now - pushed_at[call_id]))
        pipe.execute()
        return confirmed

    def resend(self, call_ids: list[str]) -> int:
        """Push again the messages of the calls among ``call_ids`` that are still queued."""
        if not call_ids:
            return 0
        pipe = self.redis.pipeline(transaction=False)
        for call_id in call_ids:
            pipe.hmget(self.keys.call(call_id), "status", "risk", "timeout", "run_id")
        messages: list[tuple[str, str, str]] = []
        for call_id, (status, risk, timeout, run) in zip(call_ids, pipe.execute(), strict=True):
            if status is not None and status.decode() == CallStatus.QUEUED.value and run:
                limit = float(timeout) if timeout else None
                queue, message = self.publisher.message(
                    call_id, RiskLevel(risk.decode()), limit, run.decode()
                )
                messages.append((call_id, queue, message))
        sent = self.store.resend_many(messages)
        self.store.mark_sent(call_ids)
        return sent


class Maintenance(threading.Thread):
    """Background thread of a worker's main process."""

    def __init__(
        self,
        backend: Backend,
        *,
        hostname: str,
        queues: list[str],
        pool: str = "",
        concurrency: int = 1,
    ) -> None:
        super().__init__(name="toolq-maintenance", daemon=True)
        settings = backend.settings
        self.settings = settings
        self.keys = backend.keys
        self.redis = backend.redis
        self.store = backend.store
        self.sweeper = Sweeper(self.store, backend.publisher, backend.approvals)
        self.readmit = Readmit(self.sweeper.admission.admit_soon)
        self.sweeper.admission.on_due = self.readmit.at
        self.hostname = hostname
        self.info: dict[str, Any] = {
            "hostname": hostname,
            "queues": queues,
            "pool": pool,
            "concurrency": concurrency,
            "pid": os.getpid(),
            "verifies_approvals": bool(settings.approval_verify_keys),
            "started_at": time.time(),
        }
        self._stopping = threading.Event()
        self.webhooks: WebhookDeliverer | None = None
        sinks: list[Sink] = []
        if settings.slack_bot_token is not None and settings.slack_routes:
            from toolq.slack.notifier import SlackNotifier

            sinks.append(SlackNotifier(backend.redis, backend.keys, settings, backend.approvals))
        self.archiver: ArchiverThread | None = None
        if backend.history is not None:
            from toolq.history.archiver import Archiver, ArchiverThread

            self.archiver = ArchiverThread(
                Archiver(backend.redis, backend.keys, settings, backend.history, hostname)
            )
        if settings.webhooks or sinks:
            from toolq.webhooks.deliverer import WebhookDeliverer

            self.webhooks = WebhookDeliverer(
                backend.redis, backend.keys, settings, hostname, sinks=sinks
            )

    def run(self) -> None:
        """Heartbeat and sweep until stopped."""
        last_beat = 0.0
        self.readmit.start()
        if self.webhooks is not None:
            self.webhooks.start()
        if self.archiver is not None:
            self.archiver.start()
        problem = ""  # what keeps maintenance from Redis now, said once until it changes
        while not self._stopping.is_set():
            try:
                if time.monotonic() - last_beat >= self.settings.heartbeat_seconds:
                    self.heartbeat()
                    last_beat = time.monotonic()
                lock_ms = max(1, int(self.settings.sweep_interval * 900))
                if self.redis.set(self.keys.sweeper_lock, self.hostname, nx=True, px=lock_ms):
                    self.sweeper.sweep()
                if problem:
                    log.warning("maintenance resumed")
                    problem = ""
            except redis.RedisError as exc:
                error = store_error(exc)
                now = f"{error.message} [{error.code}]" if error is not None else str(exc)
                if now != problem:
                    log.warning("maintenance paused: %s", now)
                    problem = now
            except Exception:
                log.exception("maintenance step failed")
            self._stopping.wait(self.settings.sweep_interval)

    def heartbeat(self) -> None:
        """Announce this worker and its queues for a few heartbeat periods."""
        if self.webhooks is not None:
            # Before the heartbeat: a worker seen alive already has the outbox filling.
            self.webhooks.announce()
        beat(self.redis, self.keys, self.settings, self.info)

    def stop(self) -> None:
        """Stop sweeping and withdraw the heartbeat (warm shutdown)."""
        self._stopping.set()
        self.readmit.stop()
        if self.webhooks is not None:
            self.webhooks.stop()
        if self.archiver is not None:
            self.archiver.stop()
        with contextlib.suppress(redis.RedisError):
            withdraw(self.redis, self.keys, self.hostname)
