"""Copy what the checker needs out of Redis into one JSON file, before Redis stops."""

from __future__ import annotations

import base64
import json
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import redis

from bench.chaos.app import EXEC_PREFIX
from toolq.broker import BATCH_TASK_NAME
from toolq.keys import Keys
from toolq.models import RiskLevel

RECORD_FIELDS = (
    "status", "run_id", "name", "risk", "idempotent", "attempt", "recoveries", "created_at",
    "started_at", "finished_at", "decided_by",
)  # fmt: skip


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def dump_redis(url: str, path: Path, keys: Keys | None = None) -> dict[str, Any]:
    """Records, execution lists, event types per call, the audit trail and leftover state."""
    k = keys or Keys()
    r = redis.Redis.from_url(url)
    call_keys = [_text(c) for c in r.scan_iter(match=k.call("*"), count=1000)]
    pipe = r.pipeline(transaction=False)
    for key in call_keys:
        pipe.hgetall(key)
    calls: dict[str, dict[str, Any]] = {}
    for key, raw in zip(call_keys, pipe.execute(), strict=True):
        record = {_text(a): _text(b) for a, b in raw.items()}
        if not record:
            continue
        call_id = key.removeprefix(k.call(""))
        entry: dict[str, Any] = {f: record.get(f) for f in RECORD_FIELDS}
        envelope = json.loads(record.get("envelope") or "{}")
        entry["tool_call_id"] = envelope.get("tool_call_id")
        result = json.loads(record.get("result") or "{}")
        entry["error_type"] = result.get("error_type")
        entry["error"] = (result.get("error") or "")[:200] or None
        calls[call_id] = entry

    exec_keys = [_text(c) for c in r.scan_iter(match=EXEC_PREFIX + "*", count=1000)]
    pipe = r.pipeline(transaction=False)
    for key in exec_keys:
        pipe.lrange(key, 0, -1)
    executions = {
        key.removeprefix(EXEC_PREFIX): [json.loads(_text(x)) for x in items]
        for key, items in zip(exec_keys, pipe.execute(), strict=True)
    }

    runs = sorted({c["run_id"] for c in calls.values() if c.get("run_id")})
    pipe = r.pipeline(transaction=False)
    for run_id in runs:
        pipe.xrange(k.run_stream(run_id))
    events: dict[str, list[list[Any]]] = defaultdict(list)
    for entries in pipe.execute():
        for _, fields in entries:
            f = {_text(a): _text(b) for a, b in fields.items()}
            events[f["call_id"]].append([f["type"], float(f.get("ts") or 0)])

    audit = [
        {_text(a): _text(b) for a, b in fields.items()} for _, fields in r.xrange(k.audit_stream)
    ]
    unacked_at = {_text(t): ts for t, ts in r.zrange("unacked_index", 0, -1, withscores=True)}
    unacked = []  # kombu's delivered-but-unacknowledged messages: (call id, queue, since)
    for tag, raw in r.hgetall("unacked").items():
        message, _, queue = json.loads(raw)
        args = json.loads(base64.b64decode(message["body"]))[0] if message.get("body") else []
        batch = message.get("headers", {}).get("task") == BATCH_TASK_NAME and args
        # a batch message (toolq.execute_many) holds every call it carries
        for call_id in [pair[0] for pair in args[0]] if batch else [args[0] if args else None]:
            unacked.append([call_id, queue, unacked_at.get(_text(tag))])
    leftovers = {
        "queues": {lvl.value: r.llen(k.queue_for(lvl)) for lvl in RiskLevel},
        "unacked": r.hlen("unacked"),
        "unsent": r.zcard(k.unsent),
        "running": r.zcard(k.running),
        "pending_approvals": r.zcard(k.pending_approvals),
    }
    data = {
        "dumped_at": time.time(),
        "calls": calls,
        "executions": executions,
        "events": events,
        "audit": audit,
        "leftovers": leftovers,
        "unacked": unacked,
    }
    path.write_text(json.dumps(data))
    r.close()
    return data


def unfinished(url: str, keys: Keys | None = None) -> int:
    """How many call records are not in a final state yet."""
    k = keys or Keys()
    r = redis.Redis.from_url(url)
    try:
        call_keys = list(r.scan_iter(match=k.call("*"), count=1000))
        pipe = r.pipeline(transaction=False)
        for key in call_keys:
            pipe.hget(key, "status")
        final = {"succeeded", "failed", "denied", "expired", "cancelled"}
        return sum(1 for s in pipe.execute() if s is not None and _text(s) not in final)
    finally:
        r.close()
