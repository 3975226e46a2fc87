"""The ``toolq`` console script: one subcommand per module."""

from __future__ import annotations

import sys
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import redis
import typer

from toolq.cli.api import api
from toolq.cli.approvals import approvals
from toolq.cli.audit import verify_audit_
from toolq.cli.calls import calls
from toolq.cli.check import check
from toolq.cli.demo import demo
from toolq.cli.dev import dev
from toolq.cli.dispatch import dispatch
from toolq.cli.history import history
from toolq.cli.keys import keys
from toolq.cli.mcp import mcp
from toolq.cli.runs import runs
from toolq.cli.tail import tail
from toolq.cli.tenants import tenants
from toolq.cli.tools import tools
from toolq.cli.worker import worker
from toolq.errors import (
    RedisAuthError,
    RedisPermissionError,
    RedisUnavailableError,
    StoreUnavailableError,
    ToolqError,
)
from toolq.redis_failures import store_error

HELP = ["-h", "--help"]
REDIS_ERRORS = (RedisUnavailableError, StoreUnavailableError, RedisAuthError, RedisPermissionError)
"""Redis failures: exit 1 (as ``require_redis``), their code shown."""
ALIASES = {"--loglevel": "--log-level"}
"""Old spellings still read, never shown in help."""


def _version(value: bool) -> None:
    if value:
        try:
            typer.echo(f"toolq {version('toolq')}")
        except PackageNotFoundError:  # run from a checkout that was never installed
            typer.echo("toolq (not installed)")
        raise typer.Exit()


app = typer.Typer(
    name="toolq",
    help="Run LLM tool calls on a distributed queue.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    context_settings={"help_option_names": HELP},
)


@app.callback()
def _root(
    show_version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Run LLM tool calls on a distributed queue."""


app.command()(worker)
app.command()(api)
app.command()(dev)
app.command()(demo)
app.command()(dispatch)
app.command()(tail)
app.command()(tools)
app.command()(check)
app.command()(mcp)
app.command()(tenants)
app.command("verify-audit")(verify_audit_)
app.add_typer(approvals, name="approvals")
app.add_typer(calls, name="calls")
app.add_typer(runs, name="runs")
app.add_typer(keys, name="keys")
app.add_typer(history, name="history")


def _metavars(command: Any) -> None:
    """Name every option's value (``PORT``, ``URL``) instead of typer's ``<str>``; none on flags.

    Duck-typed: typer builds its commands from a vendored copy of click.
    """
    for param in [*command.params, *_help_option(command)]:
        if param.param_type_name == "argument":
            # The name is the metavar already (``CALL_ID``); typer would add ``<str>``.
            param.display_type_rich = lambda ctx: None
            param.metavar = param.metavar or (param.name or "").upper()
            continue
        if param.metavar is not None:
            continue
        if getattr(param, "is_flag", False) or getattr(param, "count", False):
            param.metavar = ""
        elif param.name:
            param.metavar = NAMES.get(param.name, param.name.upper())
    for sub in getattr(command, "commands", {}).values():
        _metavars(sub)


def _help_option(command: Any) -> list[Any]:
    # click builds ``--help`` on first use and caches it: build it now to drop its metavar.
    context = command.context_class(command, info_name=command.name, help_option_names=HELP)
    made = command.get_help_option(context)
    return [made] if made is not None else []


NAMES = {"app": "MODULE:ATTR", "redis_url": "URL", "log_level": "LEVEL", "call_id": "CALL_ID"}


def _argv(argv: list[str]) -> list[str]:
    out = []
    for arg in argv:
        name, eq, value = arg.partition("=")
        out.append(ALIASES[name] + eq + value if name in ALIASES else arg)
    return out


def main() -> None:
    """Entry point of the console script."""
    command = typer.main.get_command(app)
    _metavars(command)
    try:
        command.main(args=_argv(sys.argv[1:]), prog_name="toolq")
    except ToolqError as exc:
        if isinstance(exc, REDIS_ERRORS):
            typer.echo(f"error: {exc.message} [{exc.code}]", err=True)
            raise SystemExit(1) from None
        typer.echo(f"error: {exc}", err=True)
        raise SystemExit(2) from None
    except redis.RedisError as exc:
        # Redis went away mid-command (a pre-flight PING answered), refused a write (full,
        # read-only) or toolq's credentials: one line with its code, no traceback.
        error = store_error(exc)
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if error is None:
            typer.echo(f"error: Redis answered with an error: {first}", err=True)
        elif isinstance(error, RedisUnavailableError):
            typer.echo(f"error: lost the connection to Redis: {first}", err=True)
        else:
            typer.echo(f"error: {error.message} [{error.code}]", err=True)
        raise SystemExit(1) from None
