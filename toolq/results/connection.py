"""Redis clients that ride out a short outage (a restart, a failover) instead of failing.

Every Redis client toolq makes comes from here, for one ``RedisTarget``: a URL, or a master
found through Redis Sentinel (``TOOLQ_SENTINELS``), which the clients follow to the new
master after a failover (redis-py's ``Sentinel.master_for``: each new connection asks the
Sentinels where the master is, and a write answered ``READONLY`` by a demoted master drops
the connection, so the retry below reconnects to the promoted one).

A Redis that does not answer at all (stopped, a paused VM, a network path dropped after a
failover) is a lost connection too: each wait for an answer ends after the target's socket
timeout (``redis_socket_timeout``), and the retries stop once ``RETRY_SECONDS`` have passed,
so a command fails within about ``RETRY_SECONDS`` plus two socket timeouts, never later.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import redis
import redis.asyncio
import redis.asyncio.sentinel
import redis.sentinel
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import ExponentialBackoff, NoBackoff
from redis.retry import Retry

from toolq.redis_target import SENTINEL_TIMEOUT, RedisTarget, redacted
from toolq.settings import Settings

__all__ = [
    "RETRY_SECONDS",
    "RedisTarget",
    "as_text",
    "async_probe_client",
    "async_redis_client",
    "master_address",
    "probe_client",
    "redacted",
    "redis_client",
]

RETRIES = 20
"""With the backoff below, about 17 seconds of retrying (``RETRY_SECONDS``) before an error
reaches the caller (long enough for Sentinel to notice a dead master and promote a replica)."""


def _backoff() -> ExponentialBackoff:
    return ExponentialBackoff(cap=1.0, base=0.05)


RETRY_SECONDS = sum(_backoff().compute(failures) for failures in range(1, RETRIES + 1))
"""The pauses between a command's attempts: a Redis away longer fails the command."""

T = TypeVar("T")


class WindowRetry(Retry):
    """redis-py's ``Retry`` that also stops once ``RETRY_SECONDS`` have passed since the call.

    A Redis that refuses connections fails each attempt at once, and ``RETRIES`` attempts
    take ``RETRY_SECONDS``; one that hangs fails each only after the socket timeout, and
    ``RETRIES`` of them would take twenty timeouts. Counting the time too makes the two
    alike: a command is retried for about ``RETRY_SECONDS`` whatever the failure.
    """

    def call_with_retry(
        self,
        do: Callable[[], T],
        fail: Callable[..., Any],
        is_retryable: Callable[[Exception], bool] | None = None,
        with_failure_count: bool = False,
    ) -> T:
        """``do`` with retries, ``fail`` after each failure; the last error once out of time."""
        deadline = time.monotonic() + RETRY_SECONDS

        def failed(error: Exception, failures: int) -> None:
            fail(error, failures) if with_failure_count else fail(error)
            if time.monotonic() > deadline:
                raise error

        return super().call_with_retry(do, failed, is_retryable, with_failure_count=True)


class AsyncWindowRetry(AsyncRetry):
    """``WindowRetry`` for asyncio clients."""

    async def call_with_retry(
        self,
        do: Callable[[], Awaitable[T]],
        fail: Callable[..., Any],
        is_retryable: Callable[[Exception], bool] | None = None,
        with_failure_count: bool = False,
    ) -> T:
        """``do`` with retries, ``fail`` after each failure; the last error once out of time."""
        deadline = time.monotonic() + RETRY_SECONDS

        async def failed(error: Exception, failures: int) -> None:
            await (fail(error, failures) if with_failure_count else fail(error))
            if time.monotonic() > deadline:
                raise error

        return await super().call_with_retry(do, failed, is_retryable, with_failure_count=True)


class FollowingConnection(redis.sentinel.SentinelManagedConnection):
    """A master connection that asks the Sentinels where the master is on every connect.

    redis-py's own looks the master up only in ``connect()``; a command that reconnects a
    dropped connection (``send_packed_command``) calls ``connect_check_health`` and retries
    the old address until its retries run out (redis/redis-py#3874), so a failover would
    outlast them. Here each connection attempt starts with the lookup, and a failure names
    the Sentinel master it was trying to reach.
    """

    def connect_check_health(
        self, check_health: bool = True, retry_socket_connect: bool = True
    ) -> None:
        """Connect to the master the Sentinels name now, retrying lookup and connect as one."""
        if self._sock or not self.connection_pool.is_master:
            super().connect_check_health(check_health, retry_socket_connect)
            return

        def attempt() -> None:
            self.host, self.port = self.connection_pool.get_master_address()
            try:
                super(FollowingConnection, self).connect_check_health(check_health, False)
            except redis.ConnectionError as exc:
                raise redis.ConnectionError(_unreachable(self, exc)) from exc

        if retry_socket_connect:
            self.retry.call_with_retry(attempt, lambda error: self.disconnect(error))  # type: ignore[no-untyped-call]
        else:
            attempt()

    def _connect_retry(self) -> None:
        if self._sock or not self.connection_pool.is_master:
            super()._connect_retry()  # type: ignore[no-untyped-call]
            return
        self.connect_check_health(self.connection_pool.check_connection, False)


def _unreachable(conn: Any, exc: Exception) -> str:
    service = conn.connection_pool.service_name
    return f"Sentinel master {service!r} at {conn.host}:{conn.port}: {exc}"


class AsyncFollowingConnection(redis.asyncio.sentinel.SentinelManagedConnection):
    """``FollowingConnection`` for asyncio clients."""

    async def connect_check_health(
        self, check_health: bool = True, retry_socket_connect: bool = True
    ) -> None:
        """Connect to the master the Sentinels name now, retrying lookup and connect as one."""
        if self.is_connected or not self.connection_pool.is_master:
            await super().connect_check_health(check_health, retry_socket_connect)
            return

        async def attempt() -> None:
            self.host, self.port = await self.connection_pool.get_master_address()
            try:
                await super(AsyncFollowingConnection, self).connect_check_health(
                    check_health, False
                )
            except redis.ConnectionError as exc:
                raise redis.ConnectionError(_unreachable(self, exc)) from exc

        if retry_socket_connect:
            await self.retry.call_with_retry(attempt, lambda error: self.disconnect(error=error))
        else:
            await attempt()

    async def _connect_retry(self) -> None:
        if self.is_connected or not self.connection_pool.is_master:
            await super()._connect_retry()  # type: ignore[no-untyped-call]
            return
        await self.connect_check_health(self.connection_pool.check_connection, False)


def _sentinel(target: RedisTarget, timeout: float = SENTINEL_TIMEOUT) -> redis.sentinel.Sentinel:
    """A redis-py ``Sentinel`` over the target's Sentinels."""
    return redis.sentinel.Sentinel(  # type: ignore[no-untyped-call]
        list(target.sentinels),
        sentinel_kwargs=target.sentinel_kwargs(timeout),
        **target.master_kwargs(),
    )


def as_text(value: Any) -> str:
    """A Redis reply value as ``str``: ``bytes`` decoded as UTF-8, anything else by ``str``."""
    return value.decode() if isinstance(value, bytes) else str(value)


class _BlockingSyncSentinelPool(
    redis.sentinel.SentinelConnectionPool, redis.BlockingConnectionPool
):
    """A Sentinel master's pool whose callers wait for a free connection."""


POOL_TIMEOUT = 30
"""Seconds a caller of a bounded client waits for a free connection before an error."""


def redis_client(
    where: Settings | RedisTarget | str, max_connections: int | None = None
) -> redis.Redis:
    """A client that retries commands on connection errors with exponential backoff.

    Every write toolq retries is a compare-and-set or an idempotent claim, so a command
    that reached Redis before the connection dropped cannot take effect twice. With
    ``max_connections`` its pool opens at most that many and a caller finding them all
    busy waits for one (``POOL_TIMEOUT``); without, redis-py's pool raises past its limit.
    """
    target = RedisTarget.of(where)
    options: dict[str, Any] = {
        "retry": WindowRetry(_backoff(), RETRIES),
        "retry_on_error": [redis.ConnectionError, redis.TimeoutError],
        "health_check_interval": 30,
        **target.socket_kwargs(),
    }
    if target.is_sentinel:
        assert target.master is not None
        if max_connections is not None:
            options.update(
                connection_pool_class=_BlockingSyncSentinelPool,
                max_connections=max_connections,
                timeout=POOL_TIMEOUT,
            )
        client: redis.Redis = _sentinel(target).master_for(
            target.master, connection_class=FollowingConnection, **options
        )  # type: ignore[no-untyped-call]
        return client
    if max_connections is None:
        return redis.Redis.from_url(target.url, **options)
    pool = redis.BlockingConnectionPool.from_url(
        target.url, max_connections=max_connections, timeout=POOL_TIMEOUT, **options
    )
    bounded = redis.Redis(connection_pool=pool)
    bounded.auto_close_connection_pool = True
    return bounded


class _BlockingSentinelPool(
    redis.asyncio.sentinel.SentinelConnectionPool, redis.asyncio.BlockingConnectionPool
):
    """A Sentinel master's pool whose callers wait for a free connection, as elsewhere."""


def async_redis_client(
    where: Settings | RedisTarget | str, max_connections: int
) -> redis.asyncio.Redis:
    """An asyncio client over at most ``max_connections``; callers wait for a free one."""
    target = RedisTarget.of(where)
    retry = AsyncWindowRetry(_backoff(), RETRIES)
    retry_on_error = [redis.ConnectionError, redis.TimeoutError]
    if target.is_sentinel:
        assert target.master is not None
        client: redis.asyncio.Redis = _async_sentinel(target, SENTINEL_TIMEOUT).master_for(
            target.master,
            connection_pool_class=_BlockingSentinelPool,
            connection_class=AsyncFollowingConnection,
            max_connections=max_connections,
            timeout=30,  # how long a caller waits for a free connection
            health_check_interval=30,
            retry=retry,
            retry_on_error=retry_on_error,
            **target.socket_kwargs(),
        )
        return client
    pool = redis.asyncio.BlockingConnectionPool.from_url(
        target.url,
        max_connections=max_connections,
        timeout=30,
        health_check_interval=30,
        # The pool's connections run the retries (a client given a pool passes it none).
        retry=retry,
        retry_on_error=retry_on_error,
        **target.socket_kwargs(),
    )
    return redis.asyncio.Redis(connection_pool=pool, retry=retry, retry_on_error=retry_on_error)


def _async_sentinel(target: RedisTarget, timeout: float) -> redis.asyncio.sentinel.Sentinel:
    return redis.asyncio.sentinel.Sentinel(  # type: ignore[no-untyped-call]
        list(target.sentinels),
        sentinel_kwargs={**target.sentinel_kwargs(timeout), "retry": AsyncRetry(NoBackoff(), 0)},
        **target.master_kwargs(),
    )


def probe_client(where: Settings | RedisTarget | str, timeout: float) -> redis.Redis:
    """A client that answers or fails within about ``timeout``: no retries (health checks)."""
    target = RedisTarget.of(where)
    options: dict[str, Any] = {
        "socket_connect_timeout": timeout,
        "socket_timeout": timeout,
        "retry": Retry(NoBackoff(), 0),
    }
    if target.is_sentinel:
        assert target.master is not None
        client: redis.Redis = _sentinel(target, timeout).master_for(  # type: ignore[no-untyped-call]
            target.master, connection_class=FollowingConnection, **options
        )
        return client
    return redis.Redis.from_url(target.url, **options)


def async_probe_client(where: Settings | RedisTarget | str, timeout: float) -> redis.asyncio.Redis:
    """The asyncio ``probe_client``."""
    target = RedisTarget.of(where)
    options: dict[str, Any] = {
        "socket_connect_timeout": timeout,
        "socket_timeout": timeout,
        "retry": AsyncRetry(NoBackoff(), 0),
    }
    if target.is_sentinel:
        assert target.master is not None
        client: redis.asyncio.Redis = _async_sentinel(target, timeout).master_for(
            target.master, connection_class=AsyncFollowingConnection, **options
        )
        return client
    return redis.asyncio.Redis.from_url(target.url, **options)


def master_address(
    where: Settings | RedisTarget | str, timeout: float = SENTINEL_TIMEOUT
) -> tuple[str, int]:
    """Where the Sentinels say the master is now (``MasterNotFoundError`` when none)."""
    target = RedisTarget.of(where)
    assert target.master is not None
    sentinel = _sentinel(target, timeout)
    try:
        host, port = sentinel.discover_master(target.master)  # type: ignore[no-untyped-call]
        return str(host), int(port)
    finally:
        sentinel.close()
