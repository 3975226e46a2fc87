"""Shared CLI plumbing: settings from the environment, ``--app`` loading, JSON output."""

from __future__ import annotations

import importlib
import json
import os
import sys
from typing import Any

import typer

from toolq.errors import ConfigurationError
from toolq.registry.registry import ToolRegistry
from toolq.settings import Settings

APP_HELP = "Tool registry as module:attribute (or TOOLQ_APP)."


def settings_for(app: str | None = None, redis_url: str | None = None) -> Settings:
    """Settings from ``TOOLQ_*`` variables, overridden by explicit options."""
    overrides: dict[str, Any] = {}
    if app:
        overrides["app"] = app
    if redis_url:
        overrides["redis_url"] = redis_url
    return Settings(**overrides)


def load_registry(reference: str | None) -> ToolRegistry:
    """Import ``module:attribute`` (the current directory is importable, as with uvicorn)."""
    if not reference:
        raise ConfigurationError(
            "no tool registry given: pass --app module:registry or set TOOLQ_APP"
        )
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


def print_json(value: Any) -> None:
    """Print JSON to stdout."""
    typer.echo(json.dumps(value, indent=2, ensure_ascii=False, default=str))


def fail(message: str, code: int = 1) -> typer.Exit:
    """Print an error to stderr and return the exit to raise."""
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)
