"""Worker heartbeats: the writer (``Maintenance``) and the readers (``toolq check``, API).

Each worker's main process sets ``Keys.worker(hostname)`` to JSON of its queues, pool,
and activity every ``heartbeat_seconds``, with a TTL of three periods: a worker is alive
while its key exists.
"""

from __future__ import annotations

import json
from typing import Any

import redis

from toolq.broker import TASK_NAME
from toolq.keys import Keys
from toolq.models import RiskLevel
from toolq.results.connection import probe_client
from toolq.settings import Settings


def activity() -> dict[str, Any]:
    """Calls this worker process finished and runs now, from Celery's in-memory state.

    Read in the main process, where Celery counts every call a pool slot accepts: the
    heartbeat carries them, so nothing is written on the path of a call.
    """
    from celery.worker import state

    try:
        active = [r for r in list(state.active_requests) if r.name == TASK_NAME]
    except RuntimeError:  # the set changed while it was copied; the next beat has it
        active = []
    current = sorted(str(r.args[0]) for r in active if r.args)
    accepted = int(state.total_count.get(TASK_NAME, 0))
    return {"processed": max(0, accepted - len(active)), "current": current}


def beat(client: redis.Redis, keys: Keys, settings: Settings, info: dict[str, Any]) -> None:
    """Announce the worker ``info["hostname"]`` for three heartbeat periods."""
    ttl = max(1, int(settings.heartbeat_seconds * 3))
    client.set(keys.worker(info["hostname"]), json.dumps({**info, **activity()}), ex=ttl)


def live_workers(settings: Settings) -> list[dict[str, Any]]:
    """Heartbeats of the workers alive now."""
    client = probe_client(settings, 2)
    try:
        keys = list(client.scan_iter(match=Keys(settings.key_prefix).worker_pattern, count=500))
        values = client.mget(keys) if keys else []
        return [json.loads(v) for v in values if v]
    finally:
        client.close()


def missing_queues(settings: Settings, levels: list[RiskLevel]) -> list[str]:
    """Queues among ``levels`` that no live worker consumes."""
    keys = Keys(settings.key_prefix)
    consumed: set[str] = set()
    for worker in live_workers(settings):
        consumed.update(worker.get("queues", []))
    return [keys.queue_for(level) for level in levels if keys.queue_for(level) not in consumed]
