"""``toolq dispatch``: send a model response (file or stdin) and print its calls or results."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import typer

from toolq.cli.common import (
    APP_HELP,
    FORMATS,
    REDIS_OPTION,
    load_registry,
    one_of,
    print_json,
    require_redis,
    settings_for,
)
from toolq.cli.progress import watch
from toolq.dispatch.client import Client
from toolq.errors import ToolqError, WaitTimeoutError
from toolq.quotas import DEFAULT_TENANT


def dispatch(
    source: str = typer.Argument("-", help="JSON file with the model response, or - for stdin."),
    app: str | None = typer.Option(None, "--app", envvar="TOOLQ_APP", help=APP_HELP),
    run_id: str | None = typer.Option(None, "--run-id", help="Run to add the calls to."),
    behavior: str | None = typer.Option(None, help="Behavior the tools are asked to allow."),
    principal: str | None = typer.Option(None, help="Who submits (cannot approve its own calls)."),
    tenant: str = typer.Option(
        DEFAULT_TENANT, help="Tenant the calls are run for (its budget is charged)."
    ),
    wait: float | None = typer.Option(
        None,
        metavar="SECONDS",
        help="Wait up to this many seconds for results (progress on stderr); on timeout print "
        "what there is, exit 1.",
    ),
    messages: str | None = typer.Option(
        None,
        metavar="FORMAT",
        callback=one_of(*FORMATS),
        help=f"Print provider messages in this format ({', '.join(FORMATS)}).",
    ),
    redis_url: str | None = REDIS_OPTION,
) -> None:
    """Dispatch tool calls; print the calls, or with --wait their results."""
    settings = settings_for(app, redis_url)
    registry = load_registry(settings.app, settings)
    try:
        text = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
        payload = json.loads(text)
    except (OSError, ValueError) as exc:
        typer.echo(f"error: cannot read {source}: {exc}", err=True)
        raise typer.Exit(2) from None
    require_redis(settings)
    with Client(registry, settings) as client:
        try:
            batch = client.dispatch(
                payload, run_id=run_id, behavior=behavior, principal=principal, tenant=tenant
            )
        except (ToolqError, ValueError) as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(1) from None
        timed_out = None
        try:
            if wait is not None:
                deadline = time.monotonic() + wait
                watch(client, batch, wait)  # progress on stderr, until final or out of time
                results = batch.wait(max(deadline - time.monotonic(), 0.01))
            else:
                results = batch.results()
        except WaitTimeoutError as exc:
            # What there is: every call's current state, with the outcome of finished ones.
            timed_out, results = exc, batch.results()
        if messages and timed_out is None:
            print_json(batch.to_messages(messages))
            return
        print_json(
            {
                "run_id": batch.run_id,
                "calls": [r.model_dump(mode="json", exclude_none=True) for r in results],
            }
        )
        if timed_out is not None:
            waiting = [r for r in results if not r.status.is_final]
            typer.echo(
                f"error: {timed_out} (run {batch.run_id}; not final: "
                + ", ".join(f"{r.call_id} {r.status.value}" for r in waiting)
                + ")",
                err=True,
            )
            raise typer.Exit(1)
