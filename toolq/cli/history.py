"""``toolq history``: the SQL history store: migrate it, archive into it, search and prune it."""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time
from datetime import UTC, datetime
from typing import Any

import redis
import typer
from sqlalchemy.exc import DBAPIError

from toolq.backend import Backend
from toolq.cli.common import REDIS_OPTION, fail, print_json, require_redis, settings_for
from toolq.errors import ReplicationError, ToolqError
from toolq.history.archiver import Archiver, ensure_group, lag_seconds
from toolq.history.search import CallQuery, csv_text, search_row
from toolq.history.store import HistoryStore
from toolq.settings import Settings

history = typer.Typer(
    help="The history store: upgrade, archive, search, prune.", no_args_is_help=True
)

_URL = typer.Option(
    None, "--url", envvar="TOOLQ_HISTORY_URL", help="SQLAlchemy URL of the history store."
)


def _settings(url: str | None, redis_url: str | None = None) -> Settings:
    settings = settings_for(None, redis_url)
    if url:
        settings = settings.model_copy(update={"history_url": url})
    if not settings.history_url:
        raise fail("no history store: set TOOLQ_HISTORY_URL or pass --url")
    return settings


def _store(url: str | None) -> HistoryStore:
    return HistoryStore(_settings(url).history_url)


@history.command()
def upgrade(url: str | None = _URL) -> None:
    """Create or migrate the history tables to the newest schema (Alembic upgrade head)."""
    store = _store(url)
    try:
        store.upgrade()
    finally:
        store.close()
    typer.echo("history store is at the newest schema")


@history.command()
def archive(
    url: str | None = _URL,
    redis_url: str | None = REDIS_OPTION,
    once: bool = typer.Option(False, "--once", help="Archive what waits now, then exit."),
    consumer: str = typer.Option(
        "", "--consumer", help="This archiver's name in the consumer group (default: host:pid)."
    ),
) -> None:
    """Move finished calls to the history store (workers do it too when the URL is set)."""
    settings = _settings(url, redis_url)
    require_redis(settings)
    backend = Backend(settings)
    store = backend.history
    assert store is not None
    name = consumer or f"{socket.gethostname()}:{os.getpid()}"
    archiver = Archiver(backend.redis, backend.keys, settings, store, name)
    ensure_group(backend.redis, backend.keys)
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    total = 0
    problem = ""  # what keeps the archiver from Redis or SQL now, said once until it changes
    try:
        while not stopping.is_set():
            try:
                done = archiver.step(None if once else 1000)
                archiver.prune_if_due()
            except (redis.RedisError, DBAPIError, ReplicationError) as exc:
                # An outage of Redis or of the database: the batch stays pending in the
                # group (taken again by this or another archiver), so wait and retry.
                if once:
                    raise fail(f"archiving stopped: {_reason(exc)}") from None
                if _reason(exc) != problem:
                    problem = _reason(exc)
                    typer.echo(f"toolq history archive: {problem}; retrying", err=True)
                stopping.wait(1.0)
                continue
            if problem:
                typer.echo("toolq history archive: archiving again", err=True)
                problem = ""
            total += done
            if once and not done:
                break
    except KeyboardInterrupt:
        pass
    finally:
        backend.close()
    typer.echo(f"archived {total} call(s)")


def _reason(exc: BaseException) -> str:
    """One line on what failed: the database's or Redis's own first line."""
    source = exc.orig if isinstance(exc, DBAPIError) and exc.orig is not None else exc
    lines = str(source).strip().splitlines()
    if isinstance(exc, ReplicationError):  # Redis answers; its replicas do not confirm
        return f"waiting for Redis's replicas ({lines[0] if lines else 'not confirmed'})"
    what = "history store" if isinstance(exc, DBAPIError) else "Redis"
    return f"{what} unavailable ({lines[0] if lines else type(exc).__name__})"


def _epoch(value: str | None) -> float | None:
    """Seconds since the epoch from an ISO 8601 time or a number."""
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise fail(f"{value!r} is not a time (ISO 8601, or seconds since the epoch)") from None
    return (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).timestamp()


@history.command()
def search(
    url: str | None = _URL,
    run: str | None = typer.Option(None, "--run", help="Calls of this run."),
    tool: str | None = typer.Option(None, "--tool", help="Calls of this tool."),
    status: str | None = typer.Option(None, "--status", help="Calls in this final state."),
    tenant: str | None = typer.Option(None, "--tenant", help="Calls of this tenant."),
    submitter: str | None = typer.Option(None, "--submitter", help="Calls this principal sent."),
    approver: str | None = typer.Option(None, "--approver", help="Calls this person decided."),
    since: str | None = typer.Option(None, "--since", help="Finished at or after (ISO 8601)."),
    until: str | None = typer.Option(None, "--until", help="Finished before (ISO 8601)."),
    error: str | None = typer.Option(None, "--error", help="Text the error contains."),
    limit: int = typer.Option(100, "--limit", help="Rows at most (1-1000)."),
    cursor: str | None = typer.Option(None, "--cursor", help="Next page's cursor."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON lines."),
    as_csv: bool = typer.Option(False, "--csv", help="Print CSV."),
) -> None:
    """Search archived calls, newest first."""
    store = _store(url)
    try:
        found = store.search(
            CallQuery(
                run=run,
                tool=tool,
                status=status,
                tenant=tenant,
                submitter=submitter,
                approver=approver,
                since=_epoch(since),
                until=_epoch(until),
                error=error,
                limit=limit,
                cursor=cursor,
            )
        )
    except ToolqError as exc:
        raise fail(str(exc)) from None
    finally:
        store.close()
    rows = [search_row(r) for r in found.records]
    if as_json:
        for row in rows:
            typer.echo(json.dumps(row, ensure_ascii=False))
    elif as_csv:
        typer.echo(csv_text(rows), nl=False)
    else:
        for row in rows:
            when = datetime.fromtimestamp(row["finished_at"], UTC).strftime("%Y-%m-%d %H:%M:%S")
            typer.echo(
                f"{when}  {row['call_id']}  {row['tool']}  {row['status']}  {row['error'][:60]}"
            )
    if found.next_cursor:
        typer.echo(f"next cursor: {found.next_cursor}", err=True)


@history.command()
def prune(url: str | None = _URL) -> None:
    """Delete what is past its retention (TOOLQ_HISTORY_RETENTION, per tenant overrides)."""
    settings = _settings(url)
    store = HistoryStore(settings.history_url)
    try:
        deleted = store.prune(settings.history_retention, settings.history_tenant_retention)
    finally:
        store.close()
    print_json(deleted)


@history.command()
def status(url: str | None = _URL, redis_url: str | None = REDIS_OPTION) -> None:
    """Rows per table and the archiving lag (age of the oldest unarchived final call)."""
    settings = _settings(url, redis_url)
    require_redis(settings)
    backend = Backend(settings)
    try:
        assert backend.history is not None
        out: dict[str, Any] = dict(backend.history.counts())
        out["lag_seconds"] = round(lag_seconds(backend.redis, backend.keys, time.time()), 3)
        print_json(out)
    finally:
        backend.close()
