"""Redis clients that ride out a short outage (a restart, a failover) instead of failing."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit, urlunsplit

import redis
import redis.asyncio
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

RETRIES = 20
"""With the backoff below, about ten seconds of retrying before an error reaches the caller."""


def as_text(value: Any) -> str:
    """A Redis reply value as ``str``: ``bytes`` decoded as UTF-8, anything else by ``str``."""
    return value.decode() if isinstance(value, bytes) else str(value)


def redis_client(url: str) -> redis.Redis:
    """A client that retries commands on connection errors with exponential backoff.

    Every write toolq retries is a compare-and-set or an idempotent claim, so a command
    that reached Redis before the connection dropped cannot take effect twice.
    """
    return redis.Redis.from_url(
        url,
        retry=Retry(ExponentialBackoff(cap=1.0, base=0.05), RETRIES),
        retry_on_error=[redis.ConnectionError, redis.TimeoutError],
        health_check_interval=30,
    )


def async_redis_client(url: str, max_connections: int) -> redis.asyncio.Redis:
    """An asyncio client over at most ``max_connections``; callers wait for a free one."""
    from redis.asyncio.retry import Retry as AsyncRetry

    pool = redis.asyncio.BlockingConnectionPool.from_url(
        url, max_connections=max_connections, timeout=30, health_check_interval=30
    )
    return redis.asyncio.Redis(
        connection_pool=pool,
        retry=AsyncRetry(ExponentialBackoff(cap=1.0, base=0.05), RETRIES),
        retry_on_error=[redis.ConnectionError, redis.TimeoutError],
    )


def redacted(url: str) -> str:
    """``url`` with its password replaced by ``***`` (for messages and logs)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}{port}"))
