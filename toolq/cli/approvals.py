"""``toolq approvals``: list, show, approve and deny parked calls."""

from __future__ import annotations

import typer

from toolq.cli.common import APP_HELP, load_registry, print_json, settings_for
from toolq.dispatch.client import Client
from toolq.errors import ToolqError

approvals = typer.Typer(help="Calls awaiting approval.", no_args_is_help=True)

_APP = typer.Option(None, "--app", envvar="TOOLQ_APP", help=APP_HELP)
_REDIS = typer.Option(None, envvar="TOOLQ_REDIS_URL", help="Redis URL.")


def _client(app: str | None, redis_url: str | None) -> Client:
    settings = settings_for(app, redis_url)
    return Client(load_registry(settings.app), settings)


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
        for result in pending:
            typer.echo(f"{result.call_id}  {result.name:<24} run {result.run_id}")
        if not pending:
            typer.echo("no calls awaiting approval")


@approvals.command()
def show(call_id: str, app: str | None = _APP, redis_url: str | None = _REDIS) -> None:
    """One call's record."""
    with _client(app, redis_url) as client:
        try:
            print_json(client.approvals.get(call_id).model_dump(mode="json", exclude_none=True))
        except ToolqError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(1) from None


@approvals.command()
def approve(
    call_id: str,
    by: str = typer.Option("cli", help="Approver name."),
    note: str | None = typer.Option(None),
    app: str | None = _APP,
    redis_url: str | None = _REDIS,
) -> None:
    """Approve and enqueue a parked call."""
    with _client(app, redis_url) as client:
        try:
            result = client.approvals.approve(call_id, by=by, note=note)
        except ToolqError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(1) from None
        typer.echo(f"approved {call_id}: {result.status.value}")


@approvals.command()
def deny(
    call_id: str,
    reason: str = typer.Option(..., help="Told to the model."),
    by: str = typer.Option("cli"),
    app: str | None = _APP,
    redis_url: str | None = _REDIS,
) -> None:
    """Deny a parked call with a reason."""
    with _client(app, redis_url) as client:
        try:
            client.approvals.deny(call_id, by=by, reason=reason)
        except ToolqError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(1) from None
        typer.echo(f"denied {call_id}")
