"""``toolq mcp``: serve the registry as an MCP server (stdio or Streamable HTTP)."""

from __future__ import annotations

import typer

from toolq.cli.common import (
    APP_HELP,
    REDIS_OPTION,
    load_registry,
    log_level_option,
    one_of,
    settings_for,
)
from toolq.quotas import DEFAULT_TENANT, valid_tenant

TRANSPORTS = ("stdio", "http")


def mcp(
    app: str | None = typer.Option(None, "--app", envvar="TOOLQ_APP", help=APP_HELP),
    transport: str = typer.Option(
        "stdio", callback=one_of(*TRANSPORTS), help="stdio, or http (Streamable HTTP at /mcp)."
    ),
    host: str = typer.Option("127.0.0.1", help="Interface to listen on (http)."),
    port: int = typer.Option(8001, help="Port to listen on (http)."),
    approval_wait: float = typer.Option(
        60.0, "--approval-wait", help="Seconds to wait for an approval before answering 'pending'."
    ),
    call_timeout: float | None = typer.Option(
        None,
        "--call-timeout",
        help="Seconds to wait for a queued or running call (default: no limit).",
    ),
    run_id: str | None = typer.Option(
        None, "--run-id", help="Run of every call (default: one per MCP session)."
    ),
    principal: str = typer.Option(
        "mcp", help="Submitter of every call over stdio (http: each call's token's principal)."
    ),
    tenant: str = typer.Option(
        DEFAULT_TENANT, help="Tenant every call is run for (http: tokens of another are refused)."
    ),
    redis_url: str | None = REDIS_OPTION,
    log_level: str = log_level_option("warning"),
) -> None:
    """Serve the tools over MCP; every tools/call goes through the queue and its approvals."""
    import anyio

    from toolq.api.mcp import McpOptions, create_mcp_server, http_app, serve_stdio
    from toolq.dispatch.client import Client

    try:
        valid_tenant(tenant)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--tenant") from None
    settings = settings_for(app, redis_url)
    registry = load_registry(settings.app, settings)
    options = McpOptions(
        run_id=run_id,
        principal=principal,
        tenant=tenant,
        approval_wait=approval_wait,
        call_timeout=call_timeout,
    )
    for toolset in registry.toolsets:
        toolset.watch()  # tools/list follows the upstream servers' list_changed
    with Client(registry, settings) as client:
        server = create_mcp_server(client, options)
        if transport == "stdio":
            anyio.run(serve_stdio, server)
            return
        import uvicorn

        from toolq.api.accesslog import log_config
        from toolq.api.auth import Authenticator, generate_admin_token, load_tokens

        tokens = load_tokens(settings)
        if not tokens:
            token, grant = generate_admin_token()
            tokens[token] = grant
            typer.echo(f"no TOOLQ_API_TOKENS configured; admin token for this process: {token}")
        typer.echo(f"toolq mcp on http://{host}:{port}/mcp (Authorization: Bearer)", err=True)
        uvicorn.run(
            http_app(server, Authenticator(tokens), host, tenant),
            host=host,
            port=port,
            log_level=log_level,
            log_config=log_config(),
        )
