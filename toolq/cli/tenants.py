"""``toolq tenants``: each tenant's limits, budget use and unfinished calls (and the tools')."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

import typer

from toolq.cli.common import (
    APP_HELP,
    REDIS_OPTION,
    fail,
    load_registry,
    print_json,
    require_redis,
    settings_for,
)
from toolq.dispatch.client import Client
from toolq.dispatch.tenants import TenantsReport, TenantStatus, tenants_report
from toolq.quotas import valid_tenant

COLUMNS = (
    "TENANT",
    "WEIGHT",
    "CONC",
    "RATE",
    "BUDGET",
    "USED",
    "LEFT",
    "RESETS (UTC)",
    "QUEUED",
    "THROTTLED",
    "PARKED",
    "RUNNING",
)


def tenants(
    tenant: str | None = typer.Argument(None, help="Show this tenant only."),
    app: str | None = typer.Option(None, "--app", envvar="TOOLQ_APP", help=APP_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print JSON (as GET /v1/tenants)."),
    redis_url: str | None = REDIS_OPTION,
) -> None:
    """Per tenant: weight, limits, budget used and left, queued/parked/running calls."""
    if tenant is not None:
        try:
            valid_tenant(tenant)
        except ValueError as exc:
            raise fail(str(exc), 2) from None
    settings = settings_for(app, redis_url)
    registry = load_registry(settings.app, settings)
    require_redis(settings)
    with Client(registry, settings) as client:
        report = tenants_report(client, tenant)
    if as_json:
        print_json(report.model_dump(mode="json"))
        return
    typer.echo(render(report))


def _row(status: TenantStatus) -> tuple[str, ...]:
    budget = status.budget
    money = (
        (
            f"{budget.limit:g}/{budget.per}",
            f"{budget.used:g}",
            f"{budget.left:g}",
            dt.datetime.fromtimestamp(budget.resets_at, dt.UTC).strftime("%Y-%m-%d %H:%M"),
        )
        if budget is not None
        else ("-", "-", "-", "-")
    )
    return (
        status.tenant + ("" if status.configured else " *"),
        f"{status.weight:g}",
        str(status.concurrency) if status.concurrency is not None else "-",
        status.rate_limit or "-",
        *money,
        str(status.calls.queued),
        str(status.calls.throttled),
        str(status.calls.awaiting_approval),
        str(status.calls.running),
    )


def _table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> list[str]:
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    ]


def render(report: TenantsReport) -> str:
    """The report as two text tables: tenants, then tools with limits or a cost."""
    lines = _table(COLUMNS, [_row(s) for s in report.tenants])
    lines.append('(* not in TOOLQ_TENANTS: the "*" entry\'s configuration, or the defaults)')
    tools = [
        (
            t.name,
            str(t.concurrency) if t.concurrency is not None else "-",
            str(t.use.slots_held) if t.use is not None and t.concurrency is not None else "-",
            t.rate_limit or "-",
            str(t.use.recent_starts) if t.use is not None and t.rate_limit else "-",
            "f(args)" if t.cost_function else f"{t.cost:g}",
        )
        for t in report.tools
        if t.concurrency is not None or t.rate_limit is not None or t.cost_function or t.cost
    ]
    if tools:
        lines.append("")
        lines.extend(_table(("TOOL", "CONC", "HELD", "RATE", "STARTED", "COST"), tools))
    return "\n".join(lines)
