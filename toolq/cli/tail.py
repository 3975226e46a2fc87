"""``toolq tail``: print a run's events, optionally following new ones."""

from __future__ import annotations

import typer

from toolq.cli.common import REDIS_HELP, fail, require_redis, settings_for
from toolq.dispatch.client import Client
from toolq.errors import PayloadError, ToolqError
from toolq.registry.registry import ToolRegistry
from toolq.results.events import check_stream_id


def _stream_id(value: str | None) -> str | None:
    if value is None:
        return None
    try:
        return check_stream_id(value)
    except PayloadError as exc:
        raise typer.BadParameter(exc.message) from None


def tail(
    run_id: str = typer.Argument(..., help="Run id."),
    after: str | None = typer.Option(
        None,
        metavar="EVENT_ID",
        help="Only events after this stream id (<ms>-<seq>).",
        callback=_stream_id,
    ),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing new events."),
    redis_url: str | None = typer.Option(None, envvar="TOOLQ_REDIS_URL", help=REDIS_HELP),
) -> None:
    """Print events as JSON lines."""
    settings = settings_for(redis_url=redis_url)
    require_redis(settings)
    client = Client(ToolRegistry(), settings)  # reads the run's cell when there are cells
    try:
        for event in client.events(run_id, after, follow=follow):
            typer.echo(event.model_dump_json())
    except ToolqError as exc:
        raise fail(str(exc)) from None
    except KeyboardInterrupt:
        pass
    finally:
        client.close()
