"""``toolq runs``: the runs most recently dispatched into, and one run's calls."""

from __future__ import annotations

from collections import Counter

import typer
from rich.console import Console
from rich.table import Table

from toolq.cli.calls import open_client, warn_down
from toolq.cli.common import JSON_OPTION, REDIS_OPTION, fail, print_json
from toolq.cli.render import cut, duration, error_text, print_table, status_text, when
from toolq.errors import ToolqError
from toolq.models import CallResult, CallStatus
from toolq.results.paging import MAX_LIMIT

runs = typer.Typer(help="Runs: list, show.", no_args_is_help=True)
console = Console(soft_wrap=True, highlight=False)


def counts(statuses: list[CallStatus]) -> dict[str, int]:
    """Calls per state, in the order a call goes through them; states with none left out."""
    found = Counter(statuses)
    return {s.value: found[s] for s in CallStatus if found[s]}


def counts_text(by_state: dict[str, int]) -> str:
    """``2 succeeded, 1 awaiting_approval``."""
    return ", ".join(f"{n} {state}" for state, n in by_state.items())


@runs.command("list")
def list_(
    tenant: str | None = typer.Option(None, help="Only this tenant's runs."),
    limit: int = typer.Option(50, min=1, max=MAX_LIMIT, help="At most this many runs."),
    cursor: str | None = typer.Option(
        None, help="Where the previous page ended (the cursor its note printed)."
    ),
    json_: bool = JSON_OPTION,
    redis_url: str | None = REDIS_OPTION,
) -> None:
    """The runs most recently dispatched into first, with their calls per state."""
    with open_client(None, redis_url) as client:
        try:
            page = client.runs(limit=limit, tenant=tenant, cursor=cursor)
        except ToolqError as exc:
            raise fail(str(exc)) from None
        warn_down(client, "runs")
    if json_:
        print_json([run.model_dump(mode="json") for run in page.items])
    elif not page.items:
        typer.echo("no runs")
    else:
        table = Table("run", "last dispatch", "tenant", "owner", "calls", "states", box=None)
        table.columns[0].no_wrap = True
        for run in page.items:
            table.add_row(
                run.run_id,
                when(run.last_dispatch_at),
                run.tenant,
                run.owner or "-",
                str(run.calls),
                counts_text(ordered(run.statuses))
                + (f" (of the newest {run.counted})" if run.counted < run.calls else ""),
            )
        print_table(table)
    if page.next_cursor is not None:  # on stderr, so --json output stays one JSON list
        typer.echo(f"note: more runs: next page with --cursor {page.next_cursor}", err=True)


def ordered(statuses: dict[str, int]) -> dict[str, int]:
    """Per-state counts in the order a call goes through the states."""
    return {s.value: statuses[s.value] for s in CallStatus if statuses.get(s.value)}


@runs.command()
def show(
    run_id: str = typer.Argument(..., help="Run id."),
    json_: bool = JSON_OPTION,
    redis_url: str | None = REDIS_OPTION,
) -> None:
    """A run's calls in dispatch order: state, duration, and the error or output."""
    with open_client(None, redis_url) as client:
        try:
            run = client.run(run_id)
            results = client.results(run_id)
        except ToolqError as exc:
            raise fail(str(exc)) from None
    by_state = counts([r.status for r in results])
    if json_:
        print_json(
            {
                **run.model_dump(mode="json"),
                "statuses": by_state,
                "calls": [r.model_dump(mode="json", exclude_none=True) for r in results],
            }
        )
        return
    console.print(
        f"run {run_id}  tenant {run.tenant}  owner {run.owner or '-'}  last dispatch "
        f"{when(run.last_dispatch_at)}"
    )
    console.print(f"{len(results)} calls: {counts_text(by_state)}")
    table = Table("#", "call", "tool", "state", "took", "outcome", box=None)
    table.columns[1].no_wrap = True  # people copy full ids
    for position, result in enumerate(results):
        table.add_row(
            str(position),
            result.call_id,
            result.name,
            status_text(result.status),
            duration(result.duration_ms),
            _outcome(result),
        )
    print_table(table)


def _outcome(result: CallResult) -> str:
    if result.error:
        return cut(error_text(result.error_type, result.error), 60)
    if result.status is CallStatus.SUCCEEDED:
        return cut(result.output, 60)
    return ""
