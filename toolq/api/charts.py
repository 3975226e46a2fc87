"""``GET /v1/charts``: calls per second by state and p50/p99 duration per tool, per minute.

Derived at read time from the recent-calls index (the newest calls, scored by creation)
and the small fields of their records, bounded to the last hour: workers write nothing
extra for it. A call is counted in the minute of its latest state change, so a call
created within the hour and still running shows as running now.
"""

from __future__ import annotations

import json
import math
import time
from typing import Any

from toolq.dispatch.client import Client
from toolq.models import CallStatus
from toolq.quotas import DEFAULT_TENANT
from toolq.results.connection import as_text

WINDOW_SECONDS = 3600
BUCKET_SECONDS = 60
_FIELDS = ("name", "status", "created_at", "updated_at", "finished_at", "result", "tenant")


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank ``q``-th percentile (0 < q <= 100) of non-empty ``values``."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def _recent(client: Client, start: float) -> list[Any]:
    """The small fields of one cell's calls created since ``start``."""
    r = client.redis
    raw: Any = r.zrangebyscore(client.keys.recent_calls, start, "+inf")
    ids = [as_text(c) for c in raw]
    pipe = r.pipeline(transaction=False)
    for call_id in ids:
        pipe.hmget(client.keys.call(call_id), *_FIELDS)
    return pipe.execute() if ids else []


def charts(client: Client, now: float | None = None, tenant: str | None = None) -> dict[str, Any]:
    """Per-minute series over the last hour, oldest bucket first (every cell that answers).

    ``tenant``: count that tenant's calls only (a caller bound to it).
    """
    now = time.time() if now is None else now
    buckets = WINDOW_SECONDS // BUCKET_SECONDS
    start = (math.floor(now / BUCKET_SECONDS) + 1) * BUCKET_SECONDS - WINDOW_SECONDS
    counts = {state.value: [0] * buckets for state in CallStatus}
    durations: dict[str, list[list[float]]] = {}
    for values in (v for _, cell in client.reachable()[0] for v in _recent(cell, start)):
        name, status, created, updated, finished, result, owner = (
            as_text(v) if v is not None else "" for v in values
        )
        if not name or status not in counts:
            continue
        if tenant is not None and (owner or DEFAULT_TENANT) != tenant:
            continue
        at = float(finished or updated or created or 0)
        slot = int((at - start) // BUCKET_SECONDS)
        if not 0 <= slot < buckets:
            continue
        counts[status][slot] += 1
        duration = json.loads(result).get("duration_ms") if result else None
        if isinstance(duration, int | float):
            per_tool = durations.setdefault(name, [[] for _ in range(buckets)])
            per_tool[slot].append(float(duration))
    return {
        "start": start,
        "bucket_seconds": BUCKET_SECONDS,
        "window_seconds": WINDOW_SECONDS,
        "rates": {
            state: [round(n / BUCKET_SECONDS, 4) for n in series]
            for state, series in counts.items()
            if any(series)
        },
        "durations": {
            tool: {
                "p50": [percentile(v, 50) if v else None for v in slots],
                "p99": [percentile(v, 99) if v else None for v in slots],
            }
            for tool, slots in sorted(durations.items())
        },
    }
