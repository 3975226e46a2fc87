"""``toolq tools``: print the registry's tool definitions in a provider's format."""

from __future__ import annotations

import typer

from toolq.cli.common import APP_HELP, FORMATS, load_registry, one_of, print_json, settings_for
from toolq.models import ProviderFormat


def tools(
    app: str | None = typer.Option(None, "--app", envvar="TOOLQ_APP", help=APP_HELP),
    format: str = typer.Option(
        "openai", "--format", "-f", callback=one_of(*FORMATS), help=f"{', '.join(FORMATS)}."
    ),
    strict: bool = typer.Option(False, help="OpenAI strict mode schemas."),
) -> None:
    """Print tool schemas as JSON (needs no Redis)."""
    registry = load_registry(settings_for(app).app)
    print_json(registry.schemas(ProviderFormat.parse(format), strict=strict))
