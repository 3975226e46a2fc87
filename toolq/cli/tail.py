"""``toolq tail``: print a run's events, optionally following new ones."""

from __future__ import annotations

import typer

from toolq.backend import Backend
from toolq.cli.common import REDIS_HELP, require_redis, settings_for
from toolq.errors import PayloadError
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
    backend = Backend(settings)
    log = backend.log
    events = log.follow(run_id, after) if follow else iter(log.read(run_id, after))
    try:
        for event in events:
            typer.echo(event.model_dump_json())
    except KeyboardInterrupt:
        pass
    finally:
        backend.close()
