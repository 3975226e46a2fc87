"""``toolq tools``: print the registry's tool definitions in a provider's format."""

from __future__ import annotations

import typer

from toolq.cli.common import APP_HELP, load_registry, print_json, settings_for
from toolq.models import ProviderFormat


def tools(
    app: str | None = typer.Option(None, "--app", envvar="TOOLQ_APP", help=APP_HELP),
    format: str = typer.Option(
        "openai", "--format", "-f", help="openai, openai-responses, anthropic, gemini or mcp."
    ),
    strict: bool = typer.Option(False, help="OpenAI strict mode schemas."),
) -> None:
    """Print tool schemas as JSON."""
    registry = load_registry(settings_for(app).app)
    print_json(registry.schemas(ProviderFormat.parse(format), strict=strict))
