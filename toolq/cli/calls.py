"""``toolq calls``: list, show, cancel, retry and resolve calls, as on-call people need."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from toolq.cli.common import (
    APP_HELP,
    CALL_ID_ARGUMENT,
    JSON_OPTION,
    REDIS_OPTION,
    TOKEN_OPTION,
    api_option,
    fail,
    load_registry,
    one_of,
    post_to_api,
    print_json,
    require_redis,
    require_signing,
    settings_for,
)
from toolq.cli.ids import resolve_in
from toolq.cli.render import (
    clock,
    cut,
    duration,
    error_text,
    event_line,
    print_table,
    status_text,
    when,
)
from toolq.dispatch.client import Client
from toolq.errors import ToolqError
from toolq.models import CallResult, CallStatus
from toolq.registry.registry import ToolRegistry

calls = typer.Typer(help="Calls: list, show, cancel, retry, resolve.", no_args_is_help=True)
console = Console(soft_wrap=True, highlight=False)

STATUSES = tuple(s.value for s in CallStatus)
_APP = typer.Option(
    None,
    "--app",
    envvar="TOOLQ_APP",
    help=APP_HELP + " Optional: masks secret arguments by the tool's schema.",
)
_BY = typer.Option("cli", "--by", help="Who acts (named in the events and the audit).")


def open_client(app: str | None, redis_url: str | None) -> Client:
    """A client over the ``--app`` registry, or an empty one: reading calls needs no tools.

    Without the registry a decision cannot know a tool's risk (the record's is data any
    Redis writer can change): a denial is made as for a DANGEROUS call, and a signed
    approval is refused (``approve``) rather than signed for a risk workers would reject.
    """
    settings = settings_for(app, redis_url)
    require_redis(settings)
    registry = load_registry(settings.app, settings) if settings.app else ToolRegistry()
    return Client(registry, settings)


def resolved(client: Client, call_id: str) -> str:
    """The full id of ``call_id`` (a prefix is enough), or exit 1 naming what is wrong."""
    try:
        return resolve_in(client, call_id)
    except ToolqError as exc:
        raise fail(str(exc)) from None


def warn_down(client: Client, what: str) -> None:
    """Name on stderr each cell a listing could not read."""
    for cell in client.reachable()[1]:
        typer.echo(f"warning: {cell.name} does not answer: its {what} are not listed", err=True)


def recent(client: Client, limit: int, offset: int = 0, **filters: Any) -> list[dict[str, Any]]:
    """The newest calls matching ``filters`` across every cell that answers, newest first.

    The first ``offset`` of them are skipped (a next page).
    """
    # The dashboard's listing: the same rows, read from the recent-calls index.
    from toolq.api.dashboard import recent_calls

    run_id = filters.get("run_id")
    cells = client.reachable(run_id)[0]  # a run's calls: only in its cell
    rows: list[dict[str, Any]] = []
    for _, cell in cells:
        rows.extend(recent_calls(cell, limit=offset + limit, **filters))
    rows.sort(key=lambda row: row["created_at"] or 0.0, reverse=True)
    return rows[offset : offset + limit]


@calls.command("list")
def list_(
    run_id: str | None = typer.Option(None, "--run", help="Only this run's calls."),
    status: str | None = typer.Option(
        None, callback=one_of(*STATUSES), help=f"Only this state ({', '.join(STATUSES)})."
    ),
    tool: str | None = typer.Option(None, help="Only this tool."),
    tenant: str | None = typer.Option(None, help="Only this tenant's calls."),
    limit: int = typer.Option(50, min=1, max=10_000, help="At most this many calls."),
    offset: int = typer.Option(
        0, min=0, help="Skip this many of the newest matching calls (the next page)."
    ),
    json_: bool = JSON_OPTION,
    redis_url: str | None = REDIS_OPTION,
) -> None:
    """The newest calls first, with full ids, state, duration and error."""
    with open_client(None, redis_url) as client:
        try:
            rows = recent(
                client,
                limit + 1,
                offset,
                run_id=run_id,
                tool=tool,
                tenant=tenant,
                state=CallStatus(status) if status else None,
            )
        except ToolqError as exc:
            raise fail(str(exc)) from None
        if run_id is None:
            warn_down(client, "calls")
    more = len(rows) > limit
    rows = rows[:limit]
    if json_:
        print_json(rows)
    elif not rows:
        typer.echo("no calls")
    else:
        _print_calls(rows)
    if more:  # on stderr, so --json output stays one JSON list
        typer.echo(f"note: more calls: next page with --offset {offset + limit}", err=True)


def _print_calls(rows: list[dict[str, Any]]) -> None:
    """The rows of ``calls list`` as a table."""
    table = Table("call", "created", "run", "tool", "state", "took", "error", box=None)
    table.columns[0].no_wrap = True  # people copy full ids
    for row in rows:
        table.add_row(
            row["call_id"],
            clock(row["created_at"]),
            row["run_id"],
            row["name"],
            status_text(row["status"]),
            duration(row["duration_ms"]),
            cut(row["error"], 60) if row["error"] else "",
        )
    print_table(table)


@calls.command()
def show(
    call_id: str = CALL_ID_ARGUMENT,
    json_: bool = JSON_OPTION,
    app: str | None = _APP,
    redis_url: str | None = REDIS_OPTION,
) -> None:
    """One call: its record, arguments (secrets masked), decisions, events and outcome."""
    with open_client(app, redis_url) as client:
        full = resolved(client, call_id)
        try:
            result = client.result(full)
            view = client.approvals.get(full)
            events = [e for e in client.events(view.run_id) if e.call_id == full]
        except ToolqError as exc:
            raise fail(str(exc)) from None
    if json_:
        print_json(
            {
                "call": result.model_dump(mode="json", exclude_none=True),
                "request": view.model_dump(mode="json"),
                "events": [e.model_dump(mode="json") for e in events],
            }
        )
        return
    title = Text.assemble((view.name, "bold"), f"  call {full}  ", status_text(result.status))
    console.print(title)
    console.print(
        f"run {view.run_id}  tenant {view.tenant}  risk {view.risk.value}  "
        f"provider id {view.tool_call_id}  submitted by {view.submitter or '-'}"
    )
    console.print(
        f"created {when(view.created_at)}  took {duration(result.duration_ms)}  "
        f"attempts {result.attempts}"
    )
    console.print("arguments (secrets masked):")
    console.print_json(data=view.arguments)
    if view.original_arguments is not None:
        console.print("arguments as the model sent them:")
        console.print_json(data=view.original_arguments)
    if view.status is CallStatus.AWAITING_APPROVAL and view.deadline:
        console.print(f"awaiting approval until {when(view.deadline)}")
    if view.approvals:
        console.print(f"approved by: {', '.join(view.approvals)}")
    if view.decided_by:
        console.print(f"decided by: {view.decided_by}")
    if result.retry_of:
        console.print(f"retry of call {result.retry_of}")
    if result.retried_by:
        console.print(f"retried as call {result.retried_by}")
    _outcome(result)
    console.print("events:")
    for event in events:
        console.print(Text("  ").append_text(event_line(event, view.name)))


def _outcome(result: CallResult) -> None:
    if result.error:
        console.print(Text("error: ", style="red"), end="")
        console.print(Text(error_text(result.error_type, result.error)))
    elif result.status is CallStatus.SUCCEEDED:
        console.print("output:")
        console.print_json(data=result.output, default=str)
        for block in result.content:
            console.print(f"content: {cut(block.model_dump(mode='json'))}")


@calls.command()
def cancel(
    call_id: str = CALL_ID_ARGUMENT,
    by: str = _BY,
    redis_url: str | None = REDIS_OPTION,
) -> None:
    """Cancel a call: at once when queued or parked, cooperatively when running.

    As ``POST /v1/calls/{id}/cancel`` by an admin: whoever holds the Redis credentials may
    cancel any run's calls. Exit 1 when the call is already final.
    """
    with open_client(None, redis_url) as client:
        full = resolved(client, call_id)
        try:
            before = client.result(full).status
            result = client.cancel(full, principal=by, admin=True)
        except ToolqError as exc:
            raise fail(str(exc)) from None
    if before.is_final:
        raise fail(f"call {full} is already {before.value}: nothing to cancel")
    if before is CallStatus.UNKNOWN:
        raise fail(
            f"call {full} is of unknown outcome (its worker was lost mid-call): nothing runs "
            "it; record what happened with toolq calls resolve"
        )
    if result.status is CallStatus.CANCELLED:
        typer.echo(f"cancelled {full}")
    else:
        # Running: the tool is told to stop (ctx.cancelled) and its call ends when it does.
        state = result.status.value
        typer.echo(f"cancel requested for {full} ({state}): it stops when the tool checks")


@calls.command()
def retry(
    call_id: str = CALL_ID_ARGUMENT,
    by: str = _BY,
    app: str | None = typer.Option(None, "--app", envvar="TOOLQ_APP", help=APP_HELP),
    redis_url: str | None = REDIS_OPTION,
) -> None:
    """Dispatch a new call retrying a failed, denied, expired or cancelled one.

    As ``POST /v1/calls/{id}/retry`` by an admin: same tool, arguments and run, through
    the dispatcher (so approval applies again), linked to the old call. Prints the new
    call's id and state; exit 1 when the call cannot be retried.
    """
    settings = settings_for(app, redis_url)
    registry = load_registry(settings.app, settings)  # the new call is validated and routed
    require_redis(settings)
    with Client(registry, settings) as client:
        full = resolved(client, call_id)
        try:
            new = client.retry(full, principal=by, admin=True)
        except ToolqError as exc:
            raise fail(str(exc)) from None
    typer.echo(f"retried {full} as {new.call_id}: {new.status.value}")


@calls.command()
def resolve(
    call_id: str = CALL_ID_ARGUMENT,
    succeeded: bool = typer.Option(False, "--succeeded", help="It took effect."),
    failed: bool = typer.Option(False, "--failed", help="It did not take effect."),
    rerun: bool = typer.Option(False, "--rerun", help="Run it again (a new attempt)."),
    note: str | None = typer.Option(None, "--note", help="Why; kept with it and audited."),
    result: str | None = typer.Option(
        None, "--result", help="With --succeeded: the output text the model reads."
    ),
    by: str = typer.Option("cli", "--by", help="Approver name (with --api: your token's)."),
    api: str | None = api_option("Resolve"),
    token: str | None = TOKEN_OPTION,
    unsigned: bool = typer.Option(
        False, "--unsigned", help="Resolve without a signature: only where no worker verifies."
    ),
    app: str | None = typer.Option(None, "--app", envvar="TOOLQ_APP", help=APP_HELP),
    redis_url: str | None = REDIS_OPTION,
) -> None:
    """Record the outcome of a call of unknown outcome (its worker was lost mid-call).

    As ``POST /v1/calls/{id}/resolve``: signed with TOOLQ_APPROVAL_SIGNING_KEY over the
    tool's risk from the registry (--app), or made by the API (--api, --token); authorized
    and audited like an approval. Exit 1 when the call is not of unknown outcome.
    """
    chosen = [
        name for name, on in (("succeeded", succeeded), ("failed", failed), ("rerun", rerun)) if on
    ]
    if len(chosen) != 1:
        raise fail("say what happened: exactly one of --succeeded, --failed, --rerun", 2)
    outcome = chosen[0]
    if result is not None and outcome != "succeeded":
        raise fail("--result goes with --succeeded only", 2)
    if api is not None:
        answer = resolve_through_api(api, token, call_id, outcome, note, result)
        typer.echo(f"resolved {answer.get('call_id', call_id)}: {answer.get('status', '?')}")
        return
    settings = settings_for(app, redis_url)
    require_signing(settings, unsigned=unsigned, decision="resolution", verb="resolve")
    with open_client(app, redis_url) as client:
        full = resolved(client, call_id)
        try:
            done = client.resolve_unknown(full, outcome, by=by, note=note, result=result)
        except ToolqError as exc:
            raise fail(str(exc)) from None
    typer.echo(f"resolved {full}: {done.status.value}")


def resolve_through_api(
    api: str, token: str | None, call_id: str, outcome: str, note: str | None, result: str | None
) -> dict[str, Any]:
    """``POST /v1/calls/{id}/resolve`` as the token's holder; the API signs and checks."""
    body = {"outcome": outcome, "note": note, "result": result}
    return post_to_api(api, token, f"/v1/calls/{quote(call_id, safe='')}/resolve", body)
