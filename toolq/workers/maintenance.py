"""``Maintenance``: the worker's background duties, so users run no extra process.

Heartbeat (for ``toolq check`` and metrics), recovery of calls whose worker died,
re-sending calls that were queued or approved but never reached the broker, and expiring
overdue approvals. Every step is a compare-and-set, so several workers sweeping at once
cannot do harm; a short lock just keeps them from doing the same work twice.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import threading
import time
from typing import Any

import redis

from toolq.approvals.policy import ApprovalPolicy
from toolq.approvals.store import ApprovalStore
from toolq.keys import KOMBU_UNACKED, KOMBU_UNACKED_INDEX, TASK_NAME, Keys
from toolq.models import CallStatus, RiskLevel
from toolq.registry.registry import ToolRegistry
from toolq.results.connection import redis_client
from toolq.results.store import CallStore
from toolq.settings import Settings
from toolq.workers.app import Publisher

log = logging.getLogger("toolq.maintenance")

MAX_RECOVERIES = 3
"""Re-runs of an idempotent call after worker loss before it is failed for good."""
UNSENT_GRACE = 5.0
"""Seconds a call may sit in the unsent set (approved, re-queued) before it is re-sent."""
SWEEP_BATCH = 500


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _call_id_of(raw: bytes | None) -> str | None:
    """The call id in one of kombu's ``unacked`` entries, if it is a toolq call message."""
    if raw is None:
        return None
    try:
        message = json.loads(raw)[0]
        if message["headers"].get("task") != TASK_NAME:
            return None
        body = message["body"]
        if message["properties"].get("body_encoding") == "base64":
            body = base64.b64decode(body)
        return str(json.loads(body)[0][0])
    except (ValueError, KeyError, IndexError, TypeError):
        return None


class Sweeper:
    """One sweep over the recovery sets; used by workers and ``toolq dev``."""

    def __init__(self, store: CallStore, publisher: Publisher, approvals: ApprovalStore) -> None:
        self.store = store
        self.publisher = publisher
        self.approvals = approvals
        self.keys = store.keys
        self.redis = store.redis

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
            call_id = raw.decode() if isinstance(raw, bytes) else str(raw)
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
        ids = [c.decode() if isinstance(c, bytes) else str(c) for c in unsent]
        counts["resent"] = self.resend(ids)
        counts["stranded"] = self.resend_stranded(now)
        return counts

    def resend_stranded(self, now: float) -> int:
        """Send again calls whose message a worker took but never started (it died).

        kombu keeps a taken, unacknowledged message in its ``unacked`` hash until the
        visibility timeout (above the longest time limit: an hour by default). A message
        that has sat there past ``redeliver_after`` while its call is still ``queued`` is
        sent again, once per message. Should the worker holding it still be alive (calls
        waiting behind long ones), the copy is harmless: the first delivery to start the
        call wins, and any other finds it no longer queued.
        """
        cutoff = now - self.store.settings.redeliver_after
        tags: Any = self.redis.zrangebyscore(
            KOMBU_UNACKED_INDEX, 0, cutoff, start=0, num=SWEEP_BATCH
        )
        if not tags:
            return 0
        messages: Any = self.redis.hmget(KOMBU_UNACKED, tags)
        ids = [_call_id_of(m) for m in messages]
        taken = [(tag, c) for tag, c in zip(tags, ids, strict=True) if c is not None]
        if not taken:
            return 0
        pipe = self.redis.pipeline(transaction=False)
        for _, call_id in taken:
            pipe.hget(self.keys.call(call_id), "status")
        statuses = pipe.execute()
        stranded = [
            (tag, call_id)
            for (tag, call_id), status in zip(taken, statuses, strict=True)
            if status is not None and status.decode() == CallStatus.QUEUED.value
        ]
        if not stranded:
            return 0
        ttl = int(self.store.settings.max_time_limit + 3600)
        pipe = self.redis.pipeline(transaction=False)
        for tag, _ in stranded:
            pipe.set(self.keys.resent(_text(tag)), "1", nx=True, ex=ttl)
        fresh = [c for (_, c), first in zip(stranded, pipe.execute(), strict=True) if first]
        if fresh:
            log.warning("re-sending %d calls taken by a worker that never started them", len(fresh))
        return self.resend(fresh)

    def resend(self, call_ids: list[str]) -> int:
        """Publish again the calls among ``call_ids`` that are still queued."""
        if not call_ids:
            return 0
        pipe = self.redis.pipeline(transaction=False)
        for call_id in call_ids:
            pipe.hmget(self.keys.call(call_id), "status", "risk", "timeout", "run_id")
        sends: list[tuple[str, RiskLevel, float | None, str | None]] = []
        for call_id, (status, risk, timeout, run) in zip(call_ids, pipe.execute(), strict=True):
            if status is not None and status.decode() == CallStatus.QUEUED.value:
                limit = float(timeout) if timeout else None
                sends.append(
                    (call_id, RiskLevel(risk.decode()), limit, run.decode() if run else None)
                )
        if sends:
            self.publisher.send_many(sends)
        self.store.mark_sent(call_ids)
        return len(sends)


class Maintenance(threading.Thread):
    """Background thread of a worker's main process."""

    def __init__(
        self,
        settings: Settings,
        registry: ToolRegistry,
        publisher: Publisher,
        *,
        hostname: str,
        queues: list[str],
        pool: str = "",
        concurrency: int = 1,
    ) -> None:
        super().__init__(name="toolq-maintenance", daemon=True)
        self.settings = settings
        self.keys = Keys(settings.key_prefix)
        self.redis = redis_client(settings.redis_url)
        self.store = CallStore(self.redis, settings)
        policy = ApprovalPolicy(self.redis, self.keys, settings)
        approvals = ApprovalStore(self.store, publisher, registry, policy)
        self.sweeper = Sweeper(self.store, publisher, approvals)
        self.hostname = hostname
        self.info = json.dumps(
            {
                "hostname": hostname,
                "queues": queues,
                "pool": pool,
                "concurrency": concurrency,
                "pid": os.getpid(),
                "verifies_approvals": bool(settings.approval_verify_keys),
            }
        )
        self._stopping = threading.Event()

    def run(self) -> None:
        """Heartbeat and sweep until stopped."""
        last_beat = 0.0
        while not self._stopping.is_set():
            try:
                if time.monotonic() - last_beat >= self.settings.heartbeat_seconds:
                    self.heartbeat()
                    last_beat = time.monotonic()
                lock_ms = max(1, int(self.settings.sweep_interval * 900))
                if self.redis.set(self.keys.sweeper_lock, self.hostname, nx=True, px=lock_ms):
                    self.sweeper.sweep()
            except redis.RedisError as exc:
                log.warning("maintenance cannot reach Redis: %s", exc)
            except Exception:
                log.exception("maintenance step failed")
            self._stopping.wait(self.settings.sweep_interval)

    def heartbeat(self) -> None:
        """Announce this worker and its queues for a few heartbeat periods."""
        ttl = max(1, int(self.settings.heartbeat_seconds * 3))
        self.redis.set(self.keys.worker(self.hostname), self.info, ex=ttl)

    def stop(self) -> None:
        """Stop sweeping and withdraw the heartbeat (warm shutdown)."""
        self._stopping.set()
        with contextlib.suppress(redis.RedisError):
            self.redis.delete(self.keys.worker(self.hostname))
