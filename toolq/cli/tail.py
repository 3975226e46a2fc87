"""``toolq tail``: print a run's events, one line each, optionally following new ones."""

from __future__ import annotations

import typer
from rich.console import Console

from toolq.cli.common import REDIS_OPTION, fail, require_redis, settings_for
from toolq.cli.render import event_line
from toolq.dispatch.client import Client
from toolq.errors import PayloadError, ToolqError
from toolq.models import Event
from toolq.registry.registry import ToolRegistry
from toolq.results.events import check_stream_id


def _stream_id(value: str | None) -> str | None:
    if value is None:
        return None
    try:
        return check_stream_id(value)
    except PayloadError as exc:
        raise typer.BadParameter(exc.message) from None


class ToolNames:
    """Each call's tool: from its creation event, else (tail started later) its record."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.names: dict[str, str] = {}

    def of(self, event: Event) -> str:
        """The tool of ``event``'s call, ``?`` when its record is gone."""
        name = event.data.get("name")
        if isinstance(name, str):
            self.names[event.call_id] = name
        if event.call_id not in self.names:
            try:
                cell = self.client.cell_for_call(event.call_id)  # (its name: unfenced)
                [call] = cell.store.results([event.call_id], confirm=False)
                self.names[event.call_id] = call.name
            except ToolqError:
                self.names[event.call_id] = "?"  # the record expired before its events
        return self.names[event.call_id]


def _exists(client: Client, run_id: str) -> bool:
    cell = client.cell_for_run(run_id)
    return bool(cell.redis.exists(cell.keys.run_stream(run_id)))


def tail(
    run_id: str = typer.Argument(..., help="Run id."),
    after: str | None = typer.Option(
        None,
        metavar="EVENT_ID",
        help="Only events after this stream id (<ms>-<seq>).",
        callback=_stream_id,
    ),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing new events."),
    json_: bool = typer.Option(False, "--json", help="Print each event as a JSON line."),
    redis_url: str | None = REDIS_OPTION,
) -> None:
    """Print a run's events: time, run, call, tool, step and a short text per line."""
    settings = settings_for(redis_url=redis_url)
    require_redis(settings)
    client = Client(ToolRegistry(), settings)  # reads the run's cell when there are cells
    # Lines are never folded, whatever the width: each is one event, for grep as for people.
    console = Console(soft_wrap=True, highlight=False)
    tools = ToolNames(client)
    printed = False
    try:
        for event in client.events(run_id, after, follow=follow):
            printed = True
            if json_:
                typer.echo(event.model_dump_json())
            else:
                console.print(event_line(event, tools.of(event)))
        if not printed and not follow and not _exists(client, run_id):
            raise fail(f"no events for run {run_id!r}: unknown run, or its events expired")
    except ToolqError as exc:
        raise fail(str(exc)) from None
    except KeyboardInterrupt:
        pass
    finally:
        client.close()
