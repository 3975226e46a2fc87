"""Worker heartbeats: the writer (``Maintenance``) and the readers (``toolq check``, API).

Each worker's main process sets ``Keys.worker(hostname)`` to JSON of its queues, pool,
and activity every ``heartbeat_seconds``, with a TTL of three periods: a worker is alive
while its key exists.
"""

from __future__ import annotations

import json
import time
from collections import OrderedDict
from typing import Any

import redis

from toolq.broker import BATCH_TASK_NAME, TASK_NAME
from toolq.keys import Keys
from toolq.models import RiskLevel
from toolq.redis_failures import refusal
from toolq.results.connection import as_text, probe_client
from toolq.settings import Settings
from toolq.workers.health import LOST_NOTICE_SECONDS, lapsed_at, seen_entry

_received = {"calls": 0}
"""Calls this process's Celery consumer received (``count_received``), each counted once."""
_recent: OrderedDict[str, None] = OrderedDict()
"""The latest call ids received: a call a busy slot gave back (``WorkerRuntime.give_back``)
comes again in a new message, and is not counted again when it comes back here."""
RECENT_IDS = 50_000


def calls_of(request: Any) -> list[str]:
    """The call ids a Celery request runs: one, or a batch message's."""
    if not request.args:
        return []
    if request.name == TASK_NAME:
        return [str(request.args[0])]
    if request.name == BATCH_TASK_NAME:
        return [str(pair[0]) for pair in request.args[0]]
    return []


def count_received(sender: Any = None, request: Any = None, **_: Any) -> None:
    """Count the calls of a message the consumer received (Celery's ``task_received``)."""
    if request is None:
        return
    for call_id in calls_of(request):
        if call_id in _recent:
            continue
        _recent[call_id] = None
        if len(_recent) > RECENT_IDS:
            _recent.popitem(last=False)
        _received["calls"] += 1


def activity() -> dict[str, Any]:
    """Calls this worker process finished, runs now and holds, from Celery's memory.

    Read in the main process, where Celery's consumer receives every message and keeps
    the requests not finished yet: the heartbeat carries them, so nothing is written on
    the path of a call. A batch message counts as the calls it carries. ``held`` are the
    calls of every message the worker took and has not finished (running or prefetched):
    the sweeper leaves their messages alone while this worker is alive
    (``Sweeper.resend_stranded``).
    """
    from celery.worker import state

    try:
        active = list(state.active_requests)
        unfinished = {id(r): r for r in [*state.reserved_requests, *active]}
    except RuntimeError:  # the set changed while it was copied; the next beat has it
        active, unfinished = [], {}
    # A call given back is in its first message and in the new one: listed once.
    current = sorted({c for r in active for c in calls_of(r)})
    held = sorted({c for r in unfinished.values() for c in calls_of(r)})
    return {
        "processed": max(0, _received["calls"] - len(held)),
        "current": current,
        "held": held,
    }


def beat(client: redis.Redis, keys: Keys, settings: Settings, info: dict[str, Any]) -> None:
    """Announce the worker ``info["hostname"]`` for three heartbeat periods.

    Also records it in ``Keys.workers_seen`` (``toolq.workers.health``: a worker whose
    heartbeat lapses there without a warm shutdown is reported lost), and drops the
    entries of workers lost longer ago than the health checks report them.
    """
    ttl = max(1, int(settings.heartbeat_seconds * 3))
    now = time.time()
    key = keys.worker(info["hostname"])
    pipe = client.pipeline(transaction=False)
    pipe.set(key, json.dumps({**info, **activity()}), ex=ttl)
    pipe.hset(keys.workers_seen, info["hostname"], seen_entry(info, ttl, now))
    pipe.hgetall(keys.workers_seen)
    replies = pipe.execute(raise_on_error=False)
    failed = [reply for reply in replies if isinstance(reply, Exception)]
    if failed:
        # A full Redis refuses the new values but still extends the heartbeat (EXPIRE
        # does not take memory): the worker stays seen alive, with its last activity.
        if refusal(failed[0]) != "full" or not client.expire(key, ttl):
            raise failed[0]
        return
    seen = replies[-1]
    stale = [
        name
        for name, entry in seen.items()
        if (lapsed := lapsed_at(entry)) is None or now - lapsed > LOST_NOTICE_SECONDS
    ]
    if stale:
        client.hdel(keys.workers_seen, *stale)


def withdraw(client: redis.Redis, keys: Keys, hostname: str) -> None:
    """Remove a stopping worker's heartbeat and its ``workers_seen`` entry (a clean stop)."""
    pipe = client.pipeline(transaction=False)
    pipe.delete(keys.worker(hostname))
    pipe.hdel(keys.workers_seen, hostname)
    pipe.execute()


def live_workers(settings: Settings, client: redis.Redis | None = None) -> list[dict[str, Any]]:
    """Heartbeats of the workers alive now, read with ``client`` (else a short-lived probe).

    Readers that poll (the dashboard, ``/metrics``) pass their own client: a probe is a new
    connection, and its authentication, on every poll. The workers are found through
    ``Keys.workers_seen`` (every beat records its worker there), two commands whatever else
    Redis holds: a scan of the keyspace would cost as much as the calls stored.
    """
    reader = client or probe_client(settings, 2)
    try:
        keys = Keys(settings.key_prefix)
        names = [as_text(name) for name in reader.hkeys(keys.workers_seen)]
        values = reader.mget([keys.worker(name) for name in names]) if names else []
        return [json.loads(v) for v in values if v]
    finally:
        if client is None:
            reader.close()


def missing_queues(settings: Settings, levels: list[RiskLevel]) -> list[str]:
    """Queues among ``levels`` that no live worker consumes."""
    keys = Keys(settings.key_prefix)
    consumed: set[str] = set()
    for worker in live_workers(settings):
        consumed.update(worker.get("queues", []))
    return [keys.queue_for(level) for level in levels if keys.queue_for(level) not in consumed]
