"""The ``toolq`` console script: one subcommand per module."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator, MutableMapping
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import redis
import typer
from typer.core import TyperGroup

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


COMMANDS = {
    "worker": ("worker", "worker"),
    "api": ("api", "api"),
    "dev": ("dev", "dev"),
    "demo": ("demo", "demo"),
    "dispatch": ("dispatch", "dispatch"),
    "tail": ("tail", "tail"),
    "tools": ("tools", "tools"),
    "check": ("check", "check"),
    "mcp": ("mcp", "mcp"),
    "tenants": ("tenants", "tenants"),
    "verify-audit": ("audit", "verify_audit_"),
    "approvals": ("approvals", "approvals"),
    "calls": ("calls", "calls"),
    "runs": ("runs", "runs"),
    "keys": ("keys", "keys"),
    "history": ("history", "history"),
}
"""Each subcommand: its module under ``toolq.cli`` and the command (or ``typer.Typer`` group)
there, in the order ``toolq -h`` lists them. A module is imported only when its command runs
(or help lists it): ``toolq worker`` never loads SQLAlchemy, httpx or rich for ``history``,
``approvals`` or the tables."""

SETTINGS: dict[str, Any] = {
    "no_args_is_help": True,
    "pretty_exceptions_enable": False,
    "add_completion": False,
    "context_settings": {"help_option_names": HELP},
}


class LazyCommands(MutableMapping[str, Any]):
    """The root group's subcommands by name, each built from its module on first use."""

    def __init__(self) -> None:
        self._built: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        if name not in self._built:
            module, attr = COMMANDS[name]
            target = getattr(importlib.import_module(f"toolq.cli.{module}"), attr)
            # Built under a root like ``app``, so typer gives the command what it would
            # give it there (help, settings, rich markup).
            alone = typer.Typer(**SETTINGS)
            alone.callback()(_root)
            if isinstance(target, typer.Typer):
                alone.add_typer(target, name=name)
            else:
                alone.command(name)(target)
            command = typer.main.get_command(alone).commands[name]  # type: ignore[attr-defined]
            _metavars(command)
            self._built[name] = command
        return self._built[name]

    def __setitem__(self, name: str, command: Any) -> None:  # ``add_command``
        self._built[name] = command

    def __delitem__(self, name: str) -> None:
        raise TypeError("toolq's commands cannot be removed")

    def __iter__(self) -> Iterator[str]:
        return iter([*COMMANDS, *(name for name in self._built if name not in COMMANDS)])

    def __len__(self) -> int:
        return len(list(iter(self)))


class LazyGroup(TyperGroup):
    """The ``toolq`` group: only the subcommand named on the command line is imported."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        self.commands = LazyCommands()

    def list_commands(self, ctx: Any) -> list[str]:
        """The names, without importing a command (typer's lists the built ones)."""
        return list(self.commands)


app = typer.Typer(
    name="toolq", help="Run LLM tool calls on a distributed queue.", cls=LazyGroup, **SETTINGS
)


@app.callback()
def _root(
    show_version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Run LLM tool calls on a distributed queue."""


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
    subcommands = getattr(command, "commands", {})
    if not isinstance(subcommands, LazyCommands):  # those are named as they are built
        for sub in subcommands.values():
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
