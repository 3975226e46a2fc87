"""``/metrics`` in the Prometheus text format, read from Redis at scrape time.

Queue depths, live workers and pending approvals are exact. Call events by tool, risk and
type and the execution-time histogram are counters the scripts keep in Redis as calls
change state (``Keys.metrics_events``, ``Keys.metrics_durations``), so a scrape reads two
hashes whatever the number of calls, and every API replica reports the same cluster-wide
figures.

Tenants (``toolq_tenant_*``) carry a ``tenant`` label of bounded cardinality: each tenant
named in ``TOOLQ_TENANTS`` and ``default`` get their own value; every other tenant is
counted under ``tenant="other"`` (its calls summed; limits and budgets are per named
tenant only, as "other" stands for many tenants).
"""

from __future__ import annotations

from collections import Counter

from toolq.dispatch.client import Client
from toolq.dispatch.tenants import COUNTED, calls_by_tenant, tenant_statuses, tool_limits
from toolq.models import RiskLevel
from toolq.quotas import ANY_TENANT, DEFAULT_TENANT, OTHER_TENANTS, RateLimit
from toolq.results.connection import as_text
from toolq.results.store import DURATION_BUCKETS_MS
from toolq.workers.health import history_lag, read_memory
from toolq.workers.heartbeat import live_workers


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render(client: Client) -> str:
    """The metrics page; with cells every sample has a ``shard`` label (the cell's index).

    A cell that does not answer is left out of the other metrics and shows as
    ``toolq_cell_up{shard="N"} 0``.
    """
    reachable, down = client.reachable()
    cells = [_Cell(index, cell) for index, cell in reachable]
    lines: list[str] = []

    def metric(name: str, kind: str, help_text: str) -> None:
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {kind}")

    up = {cell.index for cell in cells if cell.index is not None}
    every = sorted(up | {c.index for c in down})  # none with one Redis
    if every:
        metric("toolq_cell_up", "gauge", "Whether each cell's Redis answers (1) or not (0).")
        for index in every:
            lines.append(f'toolq_cell_up{{shard="{index}"}} {1 if index in up else 0}')
    memory = [(cell, read_memory(cell.redis)) for cell in cells]  # one INFO per cell
    metric("toolq_redis_memory_used_bytes", "gauge", "Memory Redis uses (INFO used_memory).")
    for cell, (used, _) in ((c, m) for c, m in memory if m is not None):
        lines.append(f"toolq_redis_memory_used_bytes{cell.only_label} {used}")
    metric(
        "toolq_redis_memory_max_bytes",
        "gauge",
        "Redis maxmemory (0: no limit); writes are refused (OOM) when used reaches it.",
    )
    for cell, (_, limit) in ((c, m) for c, m in memory if m is not None):
        lines.append(f"toolq_redis_memory_max_bytes{cell.only_label} {limit}")
    metric("toolq_queue_depth", "gauge", "Messages waiting in each risk queue.")
    for cell in cells:
        cell.read_depths()
        for level in RiskLevel:
            depth = cell.depths[level]
            lines.append(f'toolq_queue_depth{{{cell.label}risk="{level.value}"}} {depth}')
    metric("toolq_workers_alive", "gauge", "Live workers consuming each risk queue.")
    for cell in cells:
        workers = live_workers(cell.client.settings, cell.redis)
        for level in RiskLevel:
            queue = cell.keys.queue_for(level)
            alive = len([w for w in workers if queue in w.get("queues", [])])
            lines.append(f'toolq_workers_alive{{{cell.label}risk="{level.value}"}} {alive}')
    metric("toolq_pending_approvals", "gauge", "Calls awaiting a human decision.")
    for cell in cells:
        lines.append(f"toolq_pending_approvals{cell.only_label} {cell.pending}")
    metric(
        "toolq_calls_unknown",
        "gauge",
        "Calls of unknown outcome (lost with their worker mid-call) waiting for a person.",
    )
    for cell in cells:
        lines.append(f"toolq_calls_unknown{cell.only_label} {cell.unknown}")
    metric(
        "toolq_refused_requests_total",
        "counter",
        "Requests refused because their run belongs to another principal or tenant.",
    )
    for cell in cells:
        lines.append(f"toolq_refused_requests_total{cell.only_label} {cell.refused}")
    metric(
        "toolq_refusals_audited_total",
        "counter",
        "Refused requests written to the audit stream (one per principal, target and minute).",
    )
    for cell in cells:
        lines.append(f"toolq_refusals_audited_total{cell.only_label} {cell.audited}")
    for cell in cells:
        cell.read_counters()
    metric(
        "toolq_call_events_total",
        "counter",
        "Call events by tool, risk and type (call.succeeded: calls that succeeded, ...).",
    )
    for cell in cells:
        for (name, risk, etype), count in sorted(cell.events.items()):
            lines.append(
                f'toolq_call_events_total{{{cell.label}tool="{_label(name)}",risk="{risk}",'
                f'type="{_label(etype)}"}} {count}'
            )
    metric("toolq_call_duration_ms", "histogram", "Execution time of finished calls.")
    for cell in cells:
        for name, figures in sorted(cell.durations.items()):
            tool = f'{cell.label}tool="{_label(name)}"'
            seen = 0
            for bound in DURATION_BUCKETS_MS:
                seen += figures.get(f"le|{bound}", 0)
                lines.append(f'toolq_call_duration_ms_bucket{{{tool},le="{bound}"}} {seen}')
            count = seen + figures.get("le|+Inf", 0)
            lines.append(f'toolq_call_duration_ms_bucket{{{tool},le="+Inf"}} {count}')
            lines.append(
                f"toolq_call_duration_ms_sum{{{tool}}} {figures.get('sum_us', 0) / 1000:.3f}"
            )
            lines.append(f"toolq_call_duration_ms_count{{{tool}}} {count}")
    if client.settings.history_url:
        metric(
            "toolq_history_lag_seconds",
            "gauge",
            "Age of the oldest finished call not archived to the history store yet (0: none).",
        )
        for cell in cells:
            first = cell.redis.xrange(cell.keys.history_archive, count=1)
            lines.append(f"toolq_history_lag_seconds{cell.only_label} {history_lag(first):.3f}")
        metric("toolq_history_unarchived", "gauge", "Finished calls waiting to be archived.")
        for cell in cells:
            waiting = cell.redis.xlen(cell.keys.history_archive)
            lines.append(f"toolq_history_unarchived{cell.only_label} {waiting}")
    lines.extend(tenant_lines(client))
    return "\n".join(lines) + "\n"


class _Cell:
    """One cell's client, its label prefix and, once read, its recent calls' figures."""

    def __init__(self, index: int | None, client: Client) -> None:
        self.index = index
        self.client = client
        self.redis = client.redis
        self.keys = client.keys
        self.label = f'shard="{index}",' if index is not None else ""
        self.events: Counter[tuple[str, str, str]] = Counter()
        self.durations: dict[str, dict[str, int]] = {}
        self.depths: dict[RiskLevel, int] = {}
        self.pending = 0
        self.unknown = 0
        self.refused = 0
        self.audited = 0

    @property
    def only_label(self) -> str:
        """The cell's label as a sample's whole label set (nothing without cells)."""
        return f"{{{self.label.rstrip(',')}}}" if self.label else ""

    def read_depths(self) -> None:
        """Queue depths, parked calls and refusal counters, in one round trip."""
        pipe = self.redis.pipeline(transaction=False)
        for level in RiskLevel:
            pipe.llen(self.keys.queue_for(level))
        pipe.zcard(self.keys.pending_approvals)
        pipe.zcard(self.keys.unknown)
        pipe.hmget(self.keys.refusals, "refused", "audited")
        *depths, self.pending, self.unknown, (refused, audited) = pipe.execute()
        self.depths = dict(zip(RiskLevel, depths, strict=True))
        self.refused, self.audited = int(refused or 0), int(audited or 0)

    def read_counters(self) -> None:
        """The event and execution-time counters the scripts keep, in one round trip."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.hgetall(self.keys.metrics_events)
        pipe.hgetall(self.keys.metrics_durations)
        events, durations = pipe.execute()
        for field, value in events.items():
            name, _, rest = as_text(field).rpartition("|")
            tool, _, risk = name.rpartition("|")
            self.events[(tool, risk, rest)] += int(value)
        for field, value in durations.items():
            text = as_text(field)
            for suffix in ("|count", "|sum_us"):  # |count: an earlier version's, not read
                if text.endswith(suffix):
                    tool, kind = text[: -len(suffix)], suffix[1:]
                    break
            else:
                tool, _, bound = text.rpartition("|le|")
                kind = f"le|{bound}"
            self.durations.setdefault(tool, {})[kind] = int(value)


def _per_second(limit: RateLimit | str | None) -> float | None:
    if limit is None:
        return None
    rate = RateLimit.parse(limit)
    return rate.count / rate.seconds


def tenant_lines(client: Client) -> list[str]:
    """The ``toolq_tenant_*`` and ``toolq_tool_*`` series."""
    named = sorted({DEFAULT_TENANT} | {t for t in client.settings.tenants if t != ANY_TENANT})
    counts: Counter[tuple[str, str]] = Counter()
    for tenant, calls in calls_by_tenant(client, named).items():
        label = tenant if tenant in named else OTHER_TENANTS
        for state in COUNTED:
            counts[(label, state.value)] += getattr(calls, state.value)
        counts[(label, "throttled")] += calls.throttled
    lines: list[str] = []

    def metric(name: str, kind: str, help_text: str) -> None:
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {kind}")

    metric("toolq_tenant_calls", "gauge", "Unfinished calls per tenant and state, fleet-wide.")
    for label in [*named, OTHER_TENANTS]:
        for state in COUNTED:
            value = counts[(label, state.value)]
            lines.append(
                f'toolq_tenant_calls{{tenant="{_label(label)}",state="{state.value}"}} {value}'
            )
    metric(
        "toolq_tenant_throttled_calls",
        "gauge",
        "Queued calls waiting because a concurrency or rate limit is reached.",
    )
    for label in [*named, OTHER_TENANTS]:
        value = counts[(label, "throttled")]
        lines.append(f'toolq_tenant_throttled_calls{{tenant="{_label(label)}"}} {value}')
    statuses = tenant_statuses(client, named)
    series: dict[str, tuple[str, dict[str, float | None]]] = {
        "toolq_tenant_weight": ("Share of each risk queue's workers.", {}),
        "toolq_tenant_concurrency_limit": ("Most calls running at once, fleet-wide.", {}),
        "toolq_tenant_rate_limit_per_second": ("Most starts per second, fleet-wide.", {}),
        "toolq_tenant_budget_limit": ("Budget per period.", {}),
        "toolq_tenant_budget_used": ("Budget used in the current period.", {}),
        "toolq_tenant_budget_left": ("Budget left in the current period.", {}),
    }
    for status in statuses:
        budget = status.budget
        for name, figure in (
            ("toolq_tenant_weight", status.weight),
            ("toolq_tenant_concurrency_limit", status.concurrency),
            ("toolq_tenant_rate_limit_per_second", _per_second(status.rate_limit)),
            ("toolq_tenant_budget_limit", budget.limit if budget else None),
            ("toolq_tenant_budget_used", budget.used if budget else None),
            ("toolq_tenant_budget_left", budget.left if budget else None),
        ):
            series[name][1][status.tenant] = figure
    for name, (help_text, values) in series.items():
        metric(name, "gauge", help_text + " Named tenants only.")
        for tenant, shown in values.items():
            if shown is not None:
                lines.append(f'{name}{{tenant="{_label(tenant)}"}} {shown:g}')
    tools = [tool_limits(tool) for tool in client.registry.list()]
    metric("toolq_tool_concurrency_limit", "gauge", "Most executions of a tool at once.")
    for tool in tools:
        if tool.concurrency is not None:
            lines.append(
                f'toolq_tool_concurrency_limit{{tool="{_label(tool.name)}"}} {tool.concurrency}'
            )
    metric("toolq_tool_rate_limit_per_second", "gauge", "Most starts of a tool per second.")
    for tool in tools:
        rate = _per_second(tool.rate_limit)
        if rate is not None:
            label = _label(tool.name)
            lines.append(f'toolq_tool_rate_limit_per_second{{tool="{label}"}} {rate:g}')
    metric("toolq_tool_cost", "gauge", "What one call of a tool costs (fixed costs only).")
    for tool in tools:
        if tool.cost:
            lines.append(f'toolq_tool_cost{{tool="{_label(tool.name)}"}} {tool.cost:g}')
    return lines
