"""``toolq check``: exit 0 only when Redis answers and a worker consumes each named queue.

Warnings (a worker that does not verify signed approvals) are printed but do not change
the exit code: they name a weaker configuration, not an unhealthy one.
"""

from __future__ import annotations

import json
from typing import Any

import redis
import typer

from toolq.cli.common import settings_for
from toolq.keys import Keys
from toolq.models import RiskLevel
from toolq.settings import Settings


def live_workers(settings: Settings) -> list[dict[str, Any]]:
    """Heartbeats of the workers alive now."""
    client = redis.Redis.from_url(settings.redis_url, socket_connect_timeout=2, socket_timeout=2)
    try:
        keys = list(client.scan_iter(match=Keys(settings.key_prefix).worker_pattern, count=500))
        values = client.mget(keys) if keys else []
        return [json.loads(v) for v in values if v]
    finally:
        client.close()


def missing_queues(settings: Settings, levels: list[RiskLevel]) -> list[str]:
    """Queues among ``levels`` that no live worker consumes."""
    keys = Keys(settings.key_prefix)
    consumed: set[str] = set()
    for worker in live_workers(settings):
        consumed.update(worker.get("queues", []))
    return [keys.queue_for(level) for level in levels if keys.queue_for(level) not in consumed]


def check(
    risk: str = typer.Option("safe,moderate,dangerous", help="Queues that must have a worker."),
    redis_url: str | None = typer.Option(None, envvar="TOOLQ_REDIS_URL", help="Redis URL."),
) -> None:
    """Health check: Redis answers and every named risk queue has a live worker."""
    settings = settings_for(redis_url=redis_url)
    levels = [RiskLevel.parse(r.strip()) for r in risk.split(",") if r.strip()]
    try:
        missing = missing_queues(settings, levels)
        workers = live_workers(settings)
        unverifying = [str(w.get("hostname")) for w in workers if not w.get("verifies_approvals")]
    except (redis.RedisError, OSError) as exc:
        typer.echo(f"unhealthy: Redis at {settings.redis_url} does not answer: {exc}", err=True)
        raise typer.Exit(1) from None
    for hostname in unverifying:
        typer.echo(
            f"warning: worker {hostname} does not verify signed approvals (no "
            "TOOLQ_APPROVAL_VERIFY_KEYS): anyone who can write to Redis can run gated calls there",
            err=True,
        )
    if missing:
        typer.echo(f"unhealthy: no live worker consumes {', '.join(missing)}", err=True)
        raise typer.Exit(1)
    typer.echo("ok")
