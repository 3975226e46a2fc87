"""``toolq dispatch``: send a model response (file or stdin) and print its calls or results."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from toolq.cli.common import APP_HELP, load_registry, print_json, settings_for
from toolq.dispatch.client import Client
from toolq.errors import ToolqError


def dispatch(
    source: str = typer.Argument("-", help="JSON file with the model response, or - for stdin."),
    app: str | None = typer.Option(None, "--app", envvar="TOOLQ_APP", help=APP_HELP),
    run_id: str | None = typer.Option(None, "--run-id"),
    behavior: str | None = typer.Option(None),
    principal: str | None = typer.Option(None, help="Who submits (cannot approve its own calls)."),
    wait: float | None = typer.Option(None, help="Wait up to this many seconds for results."),
    messages: str | None = typer.Option(None, help="Print provider messages in this format."),
    redis_url: str | None = typer.Option(None, envvar="TOOLQ_REDIS_URL", help="Redis URL."),
) -> None:
    """Dispatch tool calls; print the calls, or with --wait their results."""
    settings = settings_for(app, redis_url)
    text = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
    with Client(load_registry(settings.app), settings) as client:
        try:
            batch = client.dispatch(
                json.loads(text), run_id=run_id, behavior=behavior, principal=principal
            )
            results = batch.wait(wait) if wait is not None else batch.results()
        except (ToolqError, ValueError) as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(1) from None
        if messages:
            print_json(batch.to_messages(messages))
            return
        print_json(
            {
                "run_id": batch.run_id,
                "calls": [r.model_dump(mode="json", exclude_none=True) for r in results],
            }
        )
