"""``toolq api``: the HTTP API, metrics and dashboard (uvicorn)."""

from __future__ import annotations

from types import FrameType
from typing import TYPE_CHECKING

import typer

from toolq.cli.common import (
    APP_HELP,
    REDIS_OPTION,
    load_registry,
    log_level_option,
    require_free_port,
    settings_for,
)

if TYPE_CHECKING:
    import uvicorn

    from toolq.api.cells import CellParts


def api(
    app: str | None = typer.Option(None, "--app", envvar="TOOLQ_APP", help=APP_HELP),
    host: str = typer.Option("127.0.0.1", help="Interface to listen on."),
    port: int = typer.Option(8000, help="Port to listen on."),
    redis_url: str | None = REDIS_OPTION,
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
    served = create_app(settings, registry, tokens=extra)
    config = uvicorn.Config(
        served,
        host=host,
        port=port,
        log_level=log_level,
        log_config=log_config(),  # access log without query strings (tickets)
        timeout_graceful_shutdown=SHUTDOWN_GRACE_SECONDS,
    )
    draining_server(config, served.state.parts).run()


SHUTDOWN_GRACE_SECONDS = 10
"""On SIGTERM, seconds a request still running may take before uvicorn cancels it; event
streams end at once (``draining_server``), so they never hold a shutdown this long."""


def draining_server(config: uvicorn.Config, parts: CellParts) -> uvicorn.Server:
    """Uvicorn's server, ending the API's event streams as soon as a stop signal arrives.

    uvicorn waits for open connections to close before it exits; an event stream stays
    open as long as its client does, so a SIGTERM would wait for the last dashboard to
    leave. Streams end within about a second instead, and clients resume with
    ``Last-Event-ID`` (on another replica, or on this one once restarted).
    """
    import uvicorn

    class DrainingServer(uvicorn.Server):
        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            parts.drain()
            super().handle_exit(sig, frame)

    return DrainingServer(config)
