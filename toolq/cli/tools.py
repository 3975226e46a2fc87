"""``toolq tools``: print the registry's tool definitions in a provider's format."""

from __future__ import annotations

import typer

from toolq.cli.common import (
    APP_HELP,
    FORMATS,
    fail,
    load_registry,
    one_of,
    print_json,
    settings_for,
)
from toolq.models import ProviderFormat


def tools(
    app: str | None = typer.Option(None, "--app", envvar="TOOLQ_APP", help=APP_HELP),
    format: str = typer.Option(
        "openai", "--format", "-f", callback=one_of(*FORMATS), help=f"{', '.join(FORMATS)}."
    ),
    strict: bool = typer.Option(False, help="OpenAI strict mode schemas."),
    manifest: str | None = typer.Option(
        None,
        "--manifest",
        metavar="SERVER",
        help="Print the tool manifest of this upstream MCP server instead, to pin its tools.",
    ),
) -> None:
    """Print tool schemas as JSON (needs no Redis)."""
    settings = settings_for(app)
    registry = load_registry(settings.app, settings)
    if manifest is None:
        print_json(registry.schemas(ProviderFormat.parse(format), strict=strict))
        return
    for toolset in registry.toolsets:
        if toolset.server.name == manifest:
            typer.echo(toolset.manifest().dump())
            return
    known = ", ".join(t.server.name for t in registry.toolsets) or "none"
    raise fail(f"no MCP server named {manifest!r} (configured: {known})")
