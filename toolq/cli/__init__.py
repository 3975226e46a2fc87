"""The ``toolq`` console script: one subcommand per module."""

from __future__ import annotations

import typer

from toolq.cli.api import api
from toolq.cli.approvals import approvals
from toolq.cli.check import check
from toolq.cli.demo import demo
from toolq.cli.dev import dev
from toolq.cli.dispatch import dispatch
from toolq.cli.keys import keys
from toolq.cli.mcp import mcp
from toolq.cli.tail import tail
from toolq.cli.tools import tools
from toolq.cli.worker import worker
from toolq.errors import ToolqError

app = typer.Typer(
    name="toolq",
    help="Run LLM tool calls on a distributed queue.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.command()(worker)
app.command()(api)
app.command()(dev)
app.command()(demo)
app.command()(dispatch)
app.command()(tail)
app.command()(tools)
app.command()(check)
app.command()(mcp)
app.add_typer(approvals, name="approvals")
app.add_typer(keys, name="keys")


def main() -> None:
    """Entry point of the console script."""
    try:
        app()
    except ToolqError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise SystemExit(2) from None
