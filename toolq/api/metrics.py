"""``/metrics`` in the Prometheus text format, read from Redis at scrape time.

Queue depths, live workers and pending approvals are exact. Calls by tool/risk/state and
the duration histogram cover the recent-calls window (the newest 10,000 calls), so every
API replica reports the same cluster-wide figures without counters of its own.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from toolq.dispatch.client import Client
from toolq.models import RiskLevel
from toolq.results.connection import as_text
from toolq.workers.heartbeat import live_workers

BUCKETS_MS = (5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000)


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render(client: Client) -> str:
    """The metrics page."""
    r = client.redis
    keys = client.keys
    lines: list[str] = []

    def metric(name: str, kind: str, help_text: str) -> None:
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {kind}")

    metric("toolq_queue_depth", "gauge", "Messages waiting in each risk queue.")
    for level in RiskLevel:
        lines.append(f'toolq_queue_depth{{risk="{level.value}"}} {r.llen(keys.queue_for(level))}')
    metric("toolq_workers_alive", "gauge", "Live workers consuming each risk queue.")
    workers = live_workers(client.settings)
    for level in RiskLevel:
        queue = keys.queue_for(level)
        alive = len([w for w in workers if queue in w.get("queues", [])])
        lines.append(f'toolq_workers_alive{{risk="{level.value}"}} {alive}')
    metric("toolq_pending_approvals", "gauge", "Calls awaiting a human decision.")
    lines.append(f"toolq_pending_approvals {r.zcard(keys.pending_approvals)}")

    raw: Any = r.zrange(keys.recent_calls, 0, -1)
    ids = [as_text(c) for c in raw]
    pipe = r.pipeline(transaction=False)
    for call_id in ids:
        pipe.hmget(keys.call(call_id), "name", "risk", "status", "result")
    states: Counter[tuple[str, str, str]] = Counter()
    durations: dict[str, list[float]] = {}
    for fields in pipe.execute() if ids else []:
        name, risk, status, result = (f.decode() if f else "" for f in fields)
        if not name:
            continue
        states[(name, risk, status)] += 1
        if result:
            duration = json.loads(result).get("duration_ms")
            if duration is not None:
                durations.setdefault(name, []).append(float(duration))
    metric("toolq_calls", "gauge", "Recent calls by tool, risk and state.")
    for (name, risk, status), count in sorted(states.items()):
        lines.append(f'toolq_calls{{tool="{_label(name)}",risk="{risk}",state="{status}"}} {count}')
    metric("toolq_call_duration_ms", "histogram", "Execution time of recent finished calls.")
    for name, values in sorted(durations.items()):
        tool = _label(name)
        for bound in BUCKETS_MS:
            count = sum(1 for v in values if v <= bound)
            lines.append(f'toolq_call_duration_ms_bucket{{tool="{tool}",le="{bound}"}} {count}')
        lines.append(f'toolq_call_duration_ms_bucket{{tool="{tool}",le="+Inf"}} {len(values)}')
        lines.append(f'toolq_call_duration_ms_sum{{tool="{tool}"}} {sum(values):.3f}')
        lines.append(f'toolq_call_duration_ms_count{{tool="{tool}"}} {len(values)}')
    return "\n".join(lines) + "\n"
