"""``toolq approvals``: list, show (with preview and diff), approve and deny parked calls."""

from __future__ import annotations

import json
import time

import typer
from rich.console import Console
from rich.syntax import Syntax
from rich.table import Table

from toolq.approvals.audit import verify_audit
from toolq.approvals.models import ApprovalRequest
from toolq.approvals.signing import verifier_for
from toolq.cli.common import APP_HELP, fail, load_registry, print_json, settings_for
from toolq.dispatch.client import Client
from toolq.errors import ToolqError
from toolq.results.connection import redis_client

approvals = typer.Typer(help="Calls awaiting approval.", no_args_is_help=True)
console = Console()

_APP = typer.Option(None, "--app", envvar="TOOLQ_APP", help=APP_HELP)
_REDIS = typer.Option(None, envvar="TOOLQ_REDIS_URL", help="Redis URL.")


def _client(app: str | None, redis_url: str | None) -> Client:
    settings = settings_for(app, redis_url)
    return Client(load_registry(settings.app), settings)


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
    run_id: str | None = typer.Option(None),
    risk: str | None = typer.Option(None),
    tool: str | None = typer.Option(None),
    app: str | None = _APP,
    redis_url: str | None = _REDIS,
) -> None:
    """Pending calls, soonest deadline first."""
    with _client(app, redis_url) as client:
        pending = client.approvals.pending(run_id=run_id, risk=risk, tool=tool)
        if not pending:
            console.print("no calls awaiting approval")
            return
        table = Table("call", "tool", "risk", "arguments", "run", "left")
        for request in pending:
            table.add_row(
                request.call_id,
                request.name,
                request.risk.value,
                json.dumps(request.arguments)[:60],
                request.run_id,
                _left(request.deadline),
            )
        console.print(table)


@approvals.command()
def show(call_id: str, app: str | None = _APP, redis_url: str | None = _REDIS) -> None:
    """One call with its arguments, preview and diff."""
    with _client(app, redis_url) as client:
        try:
            show_request(client.approvals.get(call_id))
        except ToolqError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(1) from None


@approvals.command()
def approve(
    call_id: str,
    by: str = typer.Option("cli", help="Approver name."),
    args: str | None = typer.Option(None, "--args", help="Edited arguments as JSON."),
    digest: str | None = typer.Option(None, help="Digest of the arguments you reviewed."),
    note: str | None = typer.Option(None),
    always: bool = typer.Option(False, help="Also approve this tool for the rest of the run."),
    app: str | None = _APP,
    redis_url: str | None = _REDIS,
) -> None:
    """Approve and enqueue a parked call."""
    with _client(app, redis_url) as client:
        try:
            arguments = json.loads(args) if args else None
            result = client.approvals.approve(
                call_id, by=by, arguments=arguments, note=note, digest=digest, always=always
            )
        except (ToolqError, ValueError) as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(1) from None
        typer.echo(f"approved {call_id}: {result.status.value}")


@approvals.command()
def deny(
    call_id: str,
    reason: str = typer.Option(..., help="Told to the model."),
    by: str = typer.Option("cli"),
    always: bool = typer.Option(False, help="Also deny this tool for the rest of the run."),
    app: str | None = _APP,
    redis_url: str | None = _REDIS,
) -> None:
    """Deny a parked call with a reason."""
    with _client(app, redis_url) as client:
        try:
            client.approvals.deny(call_id, by=by, reason=reason, always=always)
        except ToolqError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(1) from None
        typer.echo(f"denied {call_id}")


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
    client = redis_client(settings.redis_url)
    try:
        report = verify_audit(client, settings, verifier)
    finally:
        client.close()
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
