"""Shared CLI plumbing: settings, ``--app`` loading, option values, Redis checks, output."""

from __future__ import annotations

import importlib
import json
import os
import socket
import sys
from collections.abc import Callable
from typing import Any

import redis
import typer

from toolq.errors import ConfigurationError, RedisUnavailableError
from toolq.models import ProviderFormat, RiskLevel
from toolq.redis_failures import store_error
from toolq.registry.registry import ToolRegistry
from toolq.results.connection import RedisTarget, probe_client
from toolq.settings import Settings

APP_HELP = "Tool registry as module:attribute (or TOOLQ_APP)."
REDIS_HELP = "Redis URL (or TOOLQ_REDIS_URL)."
REDIS_TIMEOUT = 1.0
"""Seconds the CLI waits for Redis to answer before saying so (the clients retry for ~10 s)."""
REDIS_OPTION: Any = typer.Option(None, envvar="TOOLQ_REDIS_URL", help=REDIS_HELP)
JSON_OPTION: Any = typer.Option(False, "--json", help="Print JSON.")
CALL_ID_ARGUMENT: Any = typer.Argument(
    ..., help="Call id, or a unique prefix of one (the dashboard shows 8)."
)
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
FORMATS = tuple(f.value for f in ProviderFormat)
RISKS = tuple(r.value for r in RiskLevel)


def one_of(*values: str) -> Callable[[str | None], str | None]:
    """An option callback refusing anything but ``values`` (any case) with a usage error."""

    def check(value: str | None) -> str | None:
        if value is None or value.lower() in values:
            return value.lower() if value is not None else None
        raise typer.BadParameter(f"{value!r} is not one of {', '.join(values)}")

    return check


def log_level_option(default: str) -> Any:
    """``--log-level`` / ``-l`` (``main`` reads ``--loglevel`` as a hidden alias)."""
    return typer.Option(
        default,
        "--log-level",
        "-l",
        callback=one_of(*LOG_LEVELS),
        metavar="LEVEL",
        help=f"{', '.join(LOG_LEVELS)}.",
    )


def api_option(verb: str) -> Any:
    """``--api URL`` (or TOOLQ_API_URL): ``verb`` through the toolq API instead of here."""
    return typer.Option(
        None,
        "--api",
        envvar="TOOLQ_API_URL",
        metavar="URL",
        help=f"{verb} through this toolq API, as your --token, instead of signing here.",
    )


TOKEN_OPTION: Any = typer.Option(
    None, "--token", envvar="TOOLQ_API_TOKEN", help="Your API token, for --api."
)
"""``--token`` (or TOOLQ_API_TOKEN): who decides through ``--api``."""


def parse_risks(value: str) -> str:
    """Check a comma-separated ``--risk`` list; a usage error names the valid levels.

    An empty list is allowed (``toolq check --risk ''`` checks Redis only).
    """
    for item in value.split(","):
        if item.strip():
            try:
                RiskLevel.parse(item.strip())
            except ValueError as exc:
                raise typer.BadParameter(str(exc)) from None
    return value


def risk_list(value: str) -> list[RiskLevel]:
    """The levels of a ``--risk`` list already checked by ``parse_risks``."""
    return [RiskLevel.parse(r.strip()) for r in value.split(",") if r.strip()]


def require_redis(where: Settings | str) -> None:
    """Exit 1 with one line naming the Redis (password hidden) unless it answers PING.

    toolq's clients retry a dropped connection for about 17 seconds to ride out a restart;
    a command started against a Redis that is not there should say so at once instead. With
    cells (``RedisTarget.each_of``) it exits only when none answers, naming on stderr each
    that does not.
    """
    targets = RedisTarget.each_of(where)
    down = 0
    for index, target in targets:
        try:
            _ping(target)
        except (redis.RedisError, OSError, ValueError) as exc:
            if index is None:  # the one Redis
                raise fail(redis_problem(exc, target.describe(), target.setting)) from None
            typer.echo(
                f"warning: cell {index}: {redis_problem(exc, target.describe())}: "
                "its runs are not reachable",
                err=True,
            )
            down += 1
    if down == len(targets):
        raise fail("no cell of TOOLQ_SHARDS answers")


def _ping(target: RedisTarget) -> None:
    """PING ``target`` once, waiting ``REDIS_TIMEOUT`` at most; what fails is raised."""
    client = probe_client(target, REDIS_TIMEOUT)
    try:
        client.ping()
    finally:
        client.close()


def redis_problem(exc: BaseException, where: str, setting: str = "TOOLQ_REDIS_URL") -> str:
    """One line naming what went wrong with the Redis at ``where`` (``store_error``)."""
    error = store_error(exc, where)
    if error is None or isinstance(error, RedisUnavailableError):
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return f"Redis at {where} does not answer ({reason}); start it or set {setting}"
    return f"{error.message} [{error.code}]"


def require_free_port(host: str, port: int) -> None:
    """Exit 1 before anything starts when ``host:port`` cannot be listened on."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise fail(f"cannot listen on {host}:{port}: {exc.strerror or exc} (--port)") from None


def settings_for(app: str | None = None, redis_url: str | None = None) -> Settings:
    """Settings from ``TOOLQ_*`` variables, overridden by explicit options."""
    overrides: dict[str, Any] = {}
    if app:
        overrides["app"] = app
    if redis_url:
        overrides["redis_url"] = redis_url
    return Settings(**overrides)


def load_registry(reference: str | None, settings: Settings | None = None) -> ToolRegistry:
    """Import ``module:attribute`` (the current directory is importable, as with uvicorn).

    With ``settings``, the upstream MCP servers of ``TOOLQ_MCP_SERVERS`` are added too (and
    are enough without an app: a gateway of upstream tools only).
    """
    if not reference and not (settings is not None and settings.mcp_servers):
        raise ConfigurationError(
            "no tool registry given: pass --app module:registry or set TOOLQ_APP"
        )
    registry = _import_registry(reference) if reference else ToolRegistry()
    if settings is not None and (settings.mcp_servers or registry.toolsets):
        # Only then: the sandbox and the secrets box are imports a plain app never pays for.
        from toolq.cli.upstreams import add_upstreams

        add_upstreams(registry, settings)
    return registry


def _import_registry(reference: str) -> ToolRegistry:
    module_name, _, attribute = reference.partition(":")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(
            f"cannot import {module_name!r} from --app {reference!r}: {exc}"
        ) from exc
    target: Any = getattr(module, attribute or "registry", None)
    if callable(target) and not isinstance(target, ToolRegistry):
        target = target()
    if not isinstance(target, ToolRegistry):
        raise ConfigurationError(
            f"--app {reference!r} is not a ToolRegistry (got {type(target).__name__})"
        )
    return target


def require_signing(settings: Settings, *, unsigned: bool, decision: str, verb: str) -> None:
    """Exit 1 unless a ``decision`` made here can be signed as workers check it, or is unsigned.

    ``verb`` says how it is made through the API instead (``approve``, ``resolve``).
    """
    through_api = f"{verb} through the API with --api URL --token TOKEN"
    if settings.approval_signing_key is None and not unsigned:
        raise fail(
            f"cannot sign this {decision} (no TOOLQ_APPROVAL_SIGNING_KEY) and workers that "
            f"verify refuse an unsigned one: set the key, or {through_api} (or pass --unsigned "
            "where no worker verifies)"
        )
    if settings.approval_signing_key is not None and not settings.app:
        raise fail(
            f"a signed {decision} names the tool's risk, which comes from the registry: pass "
            f"--app or set TOOLQ_APP (or {through_api})"
        )


def post_to_api(api: str, token: str | None, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """``POST`` ``body`` (its ``None`` values left out) to ``path`` of the toolq API at ``api``.

    As the token's holder; returns the answer's JSON. Exits 1 with one line when there is no
    token, the API does not answer, or it refuses (its error message, else its text).
    """
    sent = {name: value for name, value in body.items() if value is not None}
    return dict(_ask_api("POST", api, token, path, sent))


def get_from_api(api: str, token: str | None, path: str) -> dict[str, Any]:
    """``GET`` ``path`` of the toolq API at ``api`` as the token's holder, as ``post_to_api``."""
    return dict(_ask_api("GET", api, token, path, None))


def list_from_api(api: str, token: str | None, path: str) -> tuple[list[Any], bool]:
    """``GET`` a listing (a JSON array, as ``/v1/approvals``) as ``get_from_api`` does.

    With whether it is whole: no next page (``X-Next-Cursor``) and no cell down
    (``X-Toolq-Cells-Down``).
    """
    answer, headers = _ask_api("GET", api, token, path, None, with_headers=True)
    whole = not headers.get("x-next-cursor") and not headers.get("x-toolq-cells-down")
    return (list(answer) if isinstance(answer, list) else []), whole


def _ask_api(
    method: str,
    api: str,
    token: str | None,
    path: str,
    body: dict[str, Any] | None,
    *,
    with_headers: bool = False,
) -> Any:
    import httpx  # imported here: only ``--api`` pays for it

    if not token:
        raise fail("--api needs your API token: pass --token or set TOOLQ_API_TOKEN")
    try:
        response = httpx.request(
            method,
            f"{api.rstrip('/')}{path}",
            json=body,
            headers={"Authorization": f"Bearer {token}"},
            timeout=30,
        )
    except httpx.HTTPError as exc:
        raise fail(f"the API at {api} does not answer: {exc}") from None
    try:
        answer = response.json()
    except ValueError:
        answer = {}
    if response.status_code != 200:
        error = answer.get("error", {}) if isinstance(answer, dict) else {}
        message = error.get("message") or response.text.strip()[:200]
        raise fail(f"the API refused ({response.status_code}): {message}")
    return (answer, response.headers) if with_headers else answer


def print_json(value: Any) -> None:
    """Print JSON to stdout."""
    typer.echo(json.dumps(value, indent=2, ensure_ascii=False, default=str))


def fail(message: str, code: int = 1) -> typer.Exit:
    """Print an error to stderr and return the exit to raise."""
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)
