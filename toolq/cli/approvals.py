"""``toolq approvals``: list, show (with preview and diff), approve and deny parked calls."""

from __future__ import annotations

import json
import time

import redis
import typer
from rich.console import Console
from rich.syntax import Syntax
from rich.table import Table

from toolq.approvals.audit import verify_audit
from toolq.approvals.models import ApprovalRequest
from toolq.backend import Backend
from toolq.cli.common import (
    APP_HELP,
    REDIS_HELP,
    RISKS,
    fail,
    load_registry,
    one_of,
    print_json,
    require_redis,
    settings_for,
)
from toolq.cli.ids import resolve_call_id
from toolq.dispatch.client import Client
from toolq.errors import AmbiguousIdError, CallNotFoundError, ToolqError
from toolq.models import RiskLevel
from toolq.registry.registry import ToolRegistry
from toolq.results.paging import DEFAULT_LIMIT, MAX_LIMIT
from toolq.signing import verifier_for

approvals = typer.Typer(help="Calls awaiting approval.", no_args_is_help=True)
console = Console(soft_wrap=True)

_APP = typer.Option(
    None,
    "--app",
    envvar="TOOLQ_APP",
    help=APP_HELP + " Optional: needed only to approve with edited --args.",
)
_REDIS = typer.Option(None, envvar="TOOLQ_REDIS_URL", help=REDIS_HELP)
_JSON = typer.Option(False, "--json", help="Print JSON.")
_CALL_ID = typer.Argument(..., help="Call id, or a unique prefix of one (the dashboard shows 8).")


def _client(app: str | None, redis_url: str | None) -> Client:
    """A client over the ``--app`` registry, or an empty one: deciding needs no tools.

    Without the registry a decision still goes through the approval policy, the signing
    and the compare-and-set; what it cannot do is validate edited arguments (refused
    below) or know a tool's risk: the record's is data any Redis writer can change, so
    every call is decided as a DANGEROUS one (its approvers, quorum and signed risk).
    """
    settings = settings_for(app, redis_url)
    require_redis(settings)
    registry = load_registry(settings.app, settings) if settings.app else ToolRegistry()
    return Client(registry, settings)


def _resolve(client: Client, call_id: str) -> str:
    try:
        if client.cells is None:
            return resolve_call_id(client.redis, client.keys, call_id)
        found: set[str] = set()
        for _, cell in client.reachable()[0]:
            try:
                found.add(resolve_call_id(cell.redis, cell.keys, call_id))
            except CallNotFoundError:
                continue
        if len(found) > 1:
            shown = ", ".join(sorted(found))
            raise AmbiguousIdError(
                f"call id prefix {call_id!r} matches {len(found)} calls ({shown}); type more of it"
            )
        return found.pop() if found else call_id  # unknown: the command says so
    except ToolqError as exc:
        raise fail(str(exc)) from None


def _warn_down(client: Client) -> None:
    """Name on stderr each cell whose calls a listing could not include."""
    for cell in client.reachable()[1]:
        typer.echo(f"warning: {cell.name} does not answer: its calls are not listed", err=True)


def _left(deadline: float | None) -> str:
    if deadline is None:
        return "-"
    seconds = int(deadline - time.time())
    return "overdue" if seconds < 0 else f"{seconds // 60}m{seconds % 60:02d}s"


def show_request(request: ApprovalRequest) -> None:
    """Print a parked call: arguments, metadata, preview and diff."""
    console.print(f"[bold]{request.name}[/bold]  call {request.call_id}  [{request.status.value}]")
    console.print(
        f"run {request.run_id}  risk {request.risk.value}  submitted by "
        f"{request.submitter or '-'}  deadline in {_left(request.deadline)}"
    )
    console.print(f"digest {request.digest}")
    console.print(Syntax(json.dumps(request.arguments, indent=2), "json"))
    if request.original_arguments is not None:
        console.print("original arguments:")
        console.print(Syntax(json.dumps(request.original_arguments, indent=2), "json"))
    if request.approval_metadata:
        console.print(f"metadata: {json.dumps(request.approval_metadata)}")
    if request.approvals:
        console.print(f"approved so far by: {', '.join(request.approvals)}")
    if request.preview_error:
        console.print(f"[red]preview failed:[/red] {request.preview_error}")
    if request.diff:
        console.print(f"diff ({request.diff.get('change_summary', '')}):")
        console.print(Syntax(str(request.diff.get("diff_output", "")), "diff"))
    elif request.preview is not None:
        console.print("preview:")
        console.print(Syntax(json.dumps(request.preview, indent=2), "json"))


@approvals.command("list")
def list_(
    run_id: str | None = typer.Option(None, help="Only this run."),
    risk: str | None = typer.Option(
        None, callback=one_of(*RISKS), help=f"Only this risk ({', '.join(RISKS)})."
    ),
    tool: str | None = typer.Option(None, help="Only this tool."),
    limit: int = typer.Option(
        DEFAULT_LIMIT, min=1, max=MAX_LIMIT, help=f"Calls per page (at most {MAX_LIMIT})."
    ),
    cursor: str | None = typer.Option(
        None, help="Go on after the previous page (the cursor it printed)."
    ),
    json_: bool = _JSON,
    app: str | None = _APP,
    redis_url: str | None = _REDIS,
) -> None:
    """Pending calls, oldest parked first, a page at a time, with full call ids.

    When more calls follow, the cursor of the next page is printed last (to stderr with
    --json, whose output stays a JSON list).
    """
    with _client(app, redis_url) as client:
        try:
            page = client.approvals.page(
                run_id=run_id, risk=risk, tool=tool, limit=limit, cursor=cursor
            )
        except ToolqError as exc:
            raise fail(str(exc)) from None
        pending = page.items
        if run_id is None:
            _warn_down(client)
        more = f"next page: --cursor {page.next_cursor}" if page.next_cursor else None
        if json_:
            print_json([request.model_dump(mode="json") for request in pending])
            if more:
                typer.echo(more, err=True)
            return
        if not pending:
            typer.echo("no calls awaiting approval")
            return
        # Full ids, never folded or cut, whatever the terminal width or a pipe: people copy them.
        table = Table("call", "tool", "risk", "left", "run", "arguments", box=None)
        table.columns[0].no_wrap = True
        table.columns[0].min_width = max(len(r.call_id) for r in pending)
        for request in pending:
            table.add_row(
                request.call_id,
                request.name,
                request.risk.value,
                _left(request.deadline),
                request.run_id,
                json.dumps(request.arguments)[:60],
            )
        Console(width=max(console.width, 200), soft_wrap=True).print(table)
        if more:
            shown = f"{len(pending)} of {page.total}" if page.total is not None else len(pending)
            typer.echo(f"showing {shown}; {more}")


@approvals.command()
def show(
    call_id: str = _CALL_ID,
    json_: bool = _JSON,
    app: str | None = _APP,
    redis_url: str | None = _REDIS,
) -> None:
    """One call with its arguments, preview and diff."""
    with _client(app, redis_url) as client:
        try:
            request = client.approvals.get(_resolve(client, call_id))
        except ToolqError as exc:
            raise fail(str(exc)) from None
        if json_:
            print_json(request.model_dump(mode="json"))
        else:
            show_request(request)


@approvals.command()
def approve(
    call_id: str = _CALL_ID,
    by: str = typer.Option("cli", help="Approver name."),
    args: str | None = typer.Option(
        None, "--args", metavar="JSON", help="Edited arguments as JSON (needs --app)."
    ),
    digest: str | None = typer.Option(None, help="Digest of the arguments you reviewed."),
    note: str | None = typer.Option(None, help="Kept with the decision and in the audit."),
    always: bool = typer.Option(False, help="Also approve this tool for the rest of the run."),
    app: str | None = _APP,
    redis_url: str | None = _REDIS,
) -> None:
    """Approve and enqueue a parked call."""
    if args is not None and not settings_for(app, redis_url).app:
        # Edited arguments must be validated against the tool's schema before they are
        # signed and queued; without the registry there is no schema to check them with.
        raise fail(
            "--args needs the tool registry to validate the edit: pass --app or set TOOLQ_APP", 2
        )
    with _client(app, redis_url) as client:
        full = _resolve(client, call_id)
        try:
            _note_unknown_tool(client, full)
            arguments = json.loads(args) if args else None
            result = client.approvals.approve(
                full, by=by, arguments=arguments, note=note, digest=digest, always=always
            )
        except (ToolqError, ValueError) as exc:
            raise fail(str(exc)) from None
        typer.echo(f"approved {full}: {result.status.value}")


def _note_unknown_tool(client: Client, call_id: str) -> None:
    """Say on stderr when a call is decided as DANGEROUS for want of its tool's registry."""
    request = client.approvals.get(call_id)
    if client.registry.get(request.name) is None and request.risk is not RiskLevel.DANGEROUS:
        typer.echo(
            f"note: without --app this decides {request.name!r} as a DANGEROUS call (the "
            f"record says {request.risk.value}); workers that verify approvals refuse it "
            "unless the tool is DANGEROUS there: pass --app to decide by the tool's own risk",
            err=True,
        )


@approvals.command()
def deny(
    call_id: str = _CALL_ID,
    reason: str = typer.Option(..., help="Told to the model."),
    by: str = typer.Option("cli", help="Approver name."),
    always: bool = typer.Option(False, help="Also deny this tool for the rest of the run."),
    app: str | None = _APP,
    redis_url: str | None = _REDIS,
) -> None:
    """Deny a parked call with a reason."""
    with _client(app, redis_url) as client:
        full = _resolve(client, call_id)
        try:
            client.approvals.deny(full, by=by, reason=reason, always=always)
        except ToolqError as exc:
            raise fail(str(exc)) from None
        typer.echo(f"denied {full}")


@approvals.command("verify-audit")
def verify_audit_(
    json_: bool = typer.Option(False, "--json", help="Print the counts as JSON."),
    redis_url: str | None = _REDIS,
) -> None:
    """Check every audit entry's signature (needs TOOLQ_APPROVAL_VERIFY_KEYS).

    Exits 1 when an entry's signature is invalid or a decision entry is unsigned; entries
    written by workers and the sweeper (which hold no signing key) are counted apart.
    """
    settings = settings_for(redis_url=redis_url)
    verifier = verifier_for(settings)
    if verifier is None:
        raise fail("TOOLQ_APPROVAL_VERIFY_KEYS is not set: nothing to verify the audit with", 2)
    require_redis(settings)
    report = None
    for cell in range(len(settings.shards)) if settings.shards else [None]:
        one = settings.for_cell(cell) if cell is not None else settings
        backend = Backend(one)
        try:
            found = verify_audit(backend.redis, one, verifier)
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise fail(f"cell {cell} does not answer: {exc}") from None
        finally:
            backend.close()
        report = found if report is None else report.merged(found)
    assert report is not None
    if json_:
        print_json(report.model_dump())
    else:
        typer.echo(
            f"{report.valid} valid, {report.invalid} invalid, {report.unsigned} unsigned, "
            f"{report.unsigned_system} unsigned system entries (of {report.total})"
        )
        for entry_id in report.bad_ids[:20]:
            typer.echo(f"  bad entry {entry_id}", err=True)
    if not report.ok:
        raise typer.Exit(1)
