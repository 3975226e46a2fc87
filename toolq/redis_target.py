"""``RedisTarget``: where toolq's Redis is — a URL, or a master found through Redis Sentinel.

Settings name it (``TOOLQ_REDIS_URL``, ``TOOLQ_SENTINELS``, ``TOOLQ_SENTINEL_MASTER``); the
clients (``results.connection``) and the Celery broker (``broker.app``) are built from it,
so toolq's own writes and the messages workers read reach the same master.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from redis.backoff import NoBackoff
from redis.connection import SSLConnection, UnixDomainSocketConnection, parse_url
from redis.retry import Retry

from toolq.errors import ConfigurationError
from toolq.settings import Settings, sentinel_addresses

SOCKET_TIMEOUT: float = Settings.model_fields["redis_socket_timeout"].default
"""``Settings.redis_socket_timeout`` by default (a target made from a bare URL)."""

SENTINEL_TIMEOUT = 1.0
"""Seconds one Sentinel may take to answer; a dead one is skipped for the next."""


@dataclass(frozen=True)
class RedisTarget:
    """Where toolq's Redis is: ``url`` alone, or the Sentinel master ``master``.

    With Sentinels, ``url`` still gives the username, password and database of the master.
    ``socket_timeout`` bounds each wait for the master's answer (``redis_socket_timeout``).
    """

    url: str
    sentinels: tuple[tuple[str, int], ...] = ()
    master: str | None = None
    sentinel_password: str | None = None
    socket_timeout: float = SOCKET_TIMEOUT

    @classmethod
    def of(cls, where: Settings | RedisTarget | str) -> RedisTarget:
        """The target of ``where``: settings (Sentinels when set), a target, or a plain URL."""
        if isinstance(where, RedisTarget):
            return where
        if isinstance(where, str):
            return cls(where)
        if where.shards:
            # Never the default URL by mistake: each cell has its own Redis.
            raise ConfigurationError(
                f"TOOLQ_SHARDS lists {len(where.shards)} cells: one Redis is one cell's "
                "(Settings.for_cell(n), toolq worker --shard N)"
            )
        if not where.sentinels:
            return cls(where.redis_url, socket_timeout=where.redis_socket_timeout)
        password = where.sentinel_password
        return cls(
            where.redis_url,
            tuple(sentinel_addresses(where.sentinels)),
            where.sentinel_master,
            password.get_secret_value() if password else None,
            where.redis_socket_timeout,
        )

    @classmethod
    def each_of(cls, where: Settings | str) -> list[tuple[int | None, RedisTarget]]:
        """Every Redis of ``where``: each cell of ``TOOLQ_SHARDS`` as (its index, its target).

        Without cells, the one Redis as ``(None, target)``.
        """
        if isinstance(where, str) or not where.shards:
            return [(None, cls.of(where))]
        return [(i, cls.of(where.for_cell(i))) for i in range(len(where.shards))]

    @property
    def setting(self) -> str:
        """The setting that names this Redis, for messages."""
        return "TOOLQ_SENTINELS" if self.is_sentinel else "TOOLQ_REDIS_URL"

    @property
    def is_sentinel(self) -> bool:
        """True when the master is found through Sentinels."""
        return bool(self.sentinels)

    def describe(self) -> str:
        """For messages and logs: the URL without its password, or the Sentinel master."""
        if not self.is_sentinel:
            return redacted(self.url)
        listed = ",".join(f"{host}:{port}" for host, port in self.sentinels)
        return f"Sentinel master {self.master!r} (sentinels {listed})"

    def master_kwargs(self) -> dict[str, Any]:
        """Connection options of the master from ``url`` (credentials, db), without its address."""
        kwargs: dict[str, Any] = parse_url(self.url)  # type: ignore[no-untyped-call]
        for name in ("host", "port"):
            kwargs.pop(name, None)
        connection_class = kwargs.pop("connection_class", None)
        if connection_class is UnixDomainSocketConnection:
            raise ConfigurationError("TOOLQ_SENTINELS cannot go with a unix:// TOOLQ_REDIS_URL")
        if connection_class is SSLConnection:
            raise ConfigurationError(
                "TOOLQ_SENTINELS with a rediss:// (TLS) TOOLQ_REDIS_URL is not supported"
            )
        return kwargs

    def sentinel_kwargs(self, timeout: float = SENTINEL_TIMEOUT) -> dict[str, Any]:
        """How to talk to the Sentinels themselves: short timeouts, no retries of their own."""
        kwargs: dict[str, Any] = {
            "socket_timeout": timeout,
            "socket_connect_timeout": timeout,
            "retry": Retry(NoBackoff(), 0),
        }
        if self.sentinel_password:
            kwargs["password"] = self.sentinel_password
        return kwargs

    def broker_url(self) -> str:
        """The Celery broker URL: ``url``, or kombu's ``sentinel://...;sentinel://...``."""
        if not self.is_sentinel:
            return self.url
        parts = urlsplit(self.url)
        userinfo = parts.netloc.rpartition("@")[0]
        auth = f"{userinfo}@" if userinfo else ""
        db = self.master_kwargs().get("db", 0)
        return ";".join(
            f"sentinel://{auth}{_netloc_host(host)}:{port}/{db}" for host, port in self.sentinels
        )

    def socket_kwargs(self) -> dict[str, Any]:
        """The master's connections: how long to wait for its answer, or to connect."""
        return {
            "socket_timeout": self.socket_timeout,
            "socket_connect_timeout": self.socket_timeout,
        }

    def broker_transport_options(self) -> dict[str, Any]:
        """Options of kombu's Redis transport: socket timeouts, and the Sentinels' own.

        With Sentinels: the service name and how to reach them (``SentinelChannel``).
        Kombu leaves its connections without a socket timeout: a publish, an
        acknowledgement or the record of a taken message would wait forever on a Redis
        that hangs. Its ``BRPOP`` is read only once its socket is readable, so the timeout
        does not cut it (kombu's ``health_check_interval`` drops an overdue one). Kombu
        takes the master's password and database from the broker URL.
        """
        options = self.socket_kwargs()
        if not self.is_sentinel:
            return options
        return {**options, "master_name": self.master, "sentinel_kwargs": self.sentinel_kwargs()}


def _netloc_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def redacted(url: str) -> str:
    """``url`` with its password replaced by ``***`` (for messages and logs)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}{port}"))
