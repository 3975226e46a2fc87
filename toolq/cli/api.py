"""``toolq api``: the HTTP API, metrics and dashboard (uvicorn)."""

from __future__ import annotations

import typer

from toolq.cli.common import (
    APP_HELP,
    REDIS_HELP,
    load_registry,
    log_level_option,
    require_free_port,
    settings_for,
)


def api(
    app: str | None = typer.Option(None, "--app", envvar="TOOLQ_APP", help=APP_HELP),
    host: str = typer.Option("127.0.0.1", help="Interface to listen on."),
    port: int = typer.Option(8000, help="Port to listen on."),
    redis_url: str | None = typer.Option(None, envvar="TOOLQ_REDIS_URL", help=REDIS_HELP),
    log_level: str = log_level_option("info"),
) -> None:
    """Serve the HTTP API; prints a generated admin token when none is configured."""
    import uvicorn

    from toolq.api.accesslog import log_config
    from toolq.api.app import create_app
    from toolq.api.auth import generate_admin_token, load_tokens

    settings = settings_for(app, redis_url)
    registry = load_registry(settings.app, settings)
    require_free_port(host, port)  # before a token is printed for a server that never starts
    extra = {}
    if not load_tokens(settings):
        token, grant = generate_admin_token()
        extra[token] = grant
        typer.echo(f"no TOOLQ_API_TOKENS configured; admin token for this process: {token}")
    typer.echo(f"toolq api on http://{host}:{port}  (docs at /docs, dashboard at /)")
    uvicorn.run(
        create_app(settings, registry, tokens=extra),
        host=host,
        port=port,
        log_level=log_level,
        log_config=log_config(),  # access log without query strings (tickets)
    )
