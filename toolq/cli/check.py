"""``toolq check``: exit 0 only when Redis takes writes and each named queue has a worker.

The checks are ``/healthz``'s (``toolq.workers.health``), each failure with its fix.

With ``TOOLQ_SENTINELS`` it names the master the Sentinels point to, and checks that one.

Warnings (a worker that does not verify signed approvals, a worker lost recently) are
printed but do not change the exit code: they name a weaker configuration, or an event
elsewhere, not a problem of this host (a worker's healthcheck must not fail for another's
crash; a queue left without workers fails the check itself).
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

import redis
import typer
from redis.exceptions import NoPermissionError

from toolq.cli.common import (
    REDIS_OPTION,
    parse_risks,
    require_redis,
    risk_list,
    settings_for,
)
from toolq.errors import WorkerLostError
from toolq.keys import Keys
from toolq.results.connection import RedisTarget, master_address, probe_client
from toolq.workers.health import NEARLY_FULL_CODE, run_checks
from toolq.workers.heartbeat import live_workers, missing_queues

__all__ = ["accepts_unauthenticated", "at_address", "check", "live_workers", "missing_queues"]


def accepts_unauthenticated(url: str, prefix: str = "toolq") -> bool:
    """True when a client with no credentials can read toolq's keys on the Redis at ``url``.

    Connects to the same server and database without username and password and reads one
    key under ``prefix``; Redis answers ``NOAUTH`` (``requirepass``, or an ACL default user
    that is off) or ``NOPERM`` when it is closed.
    """
    pool = redis.ConnectionPool.from_url(url, socket_connect_timeout=2, socket_timeout=2)
    kwargs = {k: v for k, v in pool.connection_kwargs.items() if k not in ("username", "password")}
    anonymous = redis.Redis(
        connection_pool=redis.ConnectionPool(connection_class=pool.connection_class, **kwargs)
    )
    try:
        anonymous.exists(f"{prefix}:check")
        return True
    except (redis.AuthenticationError, NoPermissionError):
        return False
    finally:
        anonymous.close()
        pool.disconnect()


def at_address(url: str, host: str, port: int) -> str:
    """``url`` (its credentials and database) pointed at ``host:port``."""
    parts = urlsplit(url)
    userinfo = parts.netloc.rpartition("@")[0]
    netloc = f"{userinfo}@" if userinfo else ""
    netloc += f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return urlunsplit(parts._replace(netloc=netloc))


def check(
    risk: str = typer.Option(
        "safe,moderate,dangerous",
        metavar="LEVELS",
        callback=parse_risks,
        help="Queues that must have a worker (comma-separated risk levels).",
    ),
    redis_url: str | None = REDIS_OPTION,
    allow_open_redis: bool = typer.Option(
        False, "--allow-open-redis", help="Only warn when Redis needs no password."
    ),
    shard: int | None = typer.Option(
        None, "--shard", envvar="TOOLQ_SHARD", min=0, help="With TOOLQ_SHARDS: the cell to check."
    ),
) -> None:
    """Health check: Redis answers, needs credentials, and each named queue has a worker.

    With TOOLQ_SHARDS it checks one cell: --shard N (TOOLQ_SHARD, as the worker's).
    """
    settings = settings_for(redis_url=redis_url).for_shard(shard)
    levels = risk_list(risk)
    target = RedisTarget.of(settings)
    where = target.describe()
    require_redis(settings)
    try:
        direct_url = settings.redis_url
        if target.is_sentinel:
            host, port = master_address(target)
            direct_url = at_address(settings.redis_url, host, port)
            typer.echo(f"master: {host}:{port} ({where})", err=True)
        reader = probe_client(settings, 2)
        try:
            queues = [Keys(settings.key_prefix).queue_for(level) for level in levels]
            alert = settings.history_lag_alert if settings.history_url else None
            checks = run_checks(reader, Keys(settings.key_prefix), queues, where, alert)
        finally:
            reader.close()
        workers = live_workers(settings)
        unverifying = [str(w.get("hostname")) for w in workers if not w.get("verifies_approvals")]
        is_open = accepts_unauthenticated(direct_url, settings.key_prefix)
    except (redis.RedisError, OSError) as exc:
        typer.echo(f"unhealthy: Redis at {where} does not answer: {exc}", err=True)
        raise typer.Exit(1) from None
    for hostname in unverifying:
        typer.echo(
            f"warning: worker {hostname} does not verify signed approvals (no "
            "TOOLQ_APPROVAL_VERIFY_KEYS): anyone who can write to Redis can run gated calls there",
            err=True,
        )
    if is_open:
        # Anyone who can reach the port could rewrite parked calls and read arguments.
        typer.echo(
            f"warning: Redis at {where} accepts unauthenticated connections; set requirepass "
            "or ACL users (docs/operations/redis-acls.md)",
            err=True,
        )
    # Every finding is printed, whichever of them makes the check fail.
    # Warnings leave the exit status alone: a worker's own healthcheck must not fail for
    # another worker's crash, nor for a Redis that still takes writes.
    warned = (WorkerLostError.code, NEARLY_FULL_CODE)
    for warning in (c for c in checks if c.code in warned):
        typer.echo(f"warning: {warning.reason}; {warning.fix}", err=True)
    failed = [c for c in checks if not c.ok and c.code not in warned]
    for check in failed:
        typer.echo(f"unhealthy: {check.reason}; fix: {check.fix}", err=True)
    if is_open and not allow_open_redis:
        typer.echo("unhealthy: open Redis (pass --allow-open-redis to accept it)", err=True)
        raise typer.Exit(1)
    if failed:
        raise typer.Exit(1)
    typer.echo("ok")
