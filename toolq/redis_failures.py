"""What a Redis failure is, as a toolq error: the one place that reads redis-py's exceptions.

redis-py raises its own classes for some replies (``OutOfMemoryError``, ``ReadOnlyError``,
``AuthenticationError``, ``NoPermissionError``) but not for others (``MISCONF``,
``NOREPLICAS``), and an error inside a Lua script reaches the caller as a plain
``ResponseError`` whose text carries the reply (``... -OOM command not allowed ...``).
``store_error`` reads both and names the failure once, for every caller: the clients, the
API, the CLI and the workers.

- refused writes (full, read-only, disk, replicas) → ``StoreUnavailableError``;
- wrong or missing password → ``RedisAuthError``; ACL refusal → ``RedisPermissionError``;
- no answer (connection refused, reset, timed out) → ``RedisUnavailableError``.

Note that redis-py's ``AuthenticationError`` is a ``ConnectionError``: it is told apart first.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal

import redis
from redis import exceptions as redis_errors

from toolq.errors import (
    RedisAuthError,
    RedisPermissionError,
    RedisUnavailableError,
    StoreUnavailableError,
    ToolqError,
)

RefusalReason = Literal["full", "read_only", "disk", "no_replicas"]

_REPLY = re.compile(r"(?:^|[\s-])(OOM|READONLY|MISCONF|NOREPLICAS|NOAUTH|WRONGPASS|NOPERM)\b")
_REASONS: dict[str, RefusalReason] = {
    "OOM": "full",
    "READONLY": "read_only",
    "MISCONF": "disk",
    "NOREPLICAS": "no_replicas",
}
_REFUSED = {
    "full": "is full (maxmemory reached, policy noeviction) and refuses writes: free memory "
    "or raise maxmemory, then retry",
    "read_only": "is a read-only replica and refuses writes: point TOOLQ_REDIS_URL at the "
    "master (or use TOOLQ_SENTINELS)",
    "disk": "refuses writes because it cannot save to disk (MISCONF): fix its disk or "
    "persistence settings, then retry",
    "no_replicas": "refuses writes: fewer replicas than its min-replicas-to-write are "
    "connected; retry once they are back",
}
RETRY_AFTER = 5
"""Seconds an HTTP client is told to wait (``Retry-After``) when Redis refuses or is down."""


def refusal(exc: BaseException) -> RefusalReason | None:
    """Why Redis refused a write in ``exc`` (full, read-only, disk, replicas), else None."""
    if isinstance(exc, redis_errors.OutOfMemoryError):
        return "full"
    if isinstance(exc, redis_errors.ReadOnlyError):
        return "read_only"
    if not isinstance(exc, redis_errors.ResponseError):
        return None
    found = _REPLY.search(str(exc))
    return _REASONS.get(found.group(1)) if found else None


def unblocked(exc: BaseException) -> bool:
    """Whether ``exc`` is Redis ending a blocking command because its role changed.

    A master demoted to a replica (a failover, ``REPLICAOF``) answers the clients blocked in
    commands that write (``BRPOP``) with ``UNBLOCKED``: their connection is as good as lost.
    """
    return isinstance(exc, redis_errors.ResponseError) and str(exc).startswith("UNBLOCKED")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def store_error(exc: BaseException, where: str = "") -> ToolqError | None:
    """The toolq error ``exc`` (a Redis failure) is, or None when it is no Redis failure.

    ``where`` names the Redis in the message (no password: ``RedisTarget.describe``).
    """
    if isinstance(exc, ToolqError):
        return exc
    at = f"Redis at {where}" if where else "Redis"
    reason = refusal(exc)
    if reason is not None:
        return StoreUnavailableError(f"{at} {_REFUSED[reason]}", reason=reason)
    found = _REPLY.search(str(exc)) if isinstance(exc, redis.RedisError) else None
    reply = found.group(1) if found else ""
    if (
        isinstance(exc, redis_errors.AuthenticationError)
        or reply in ("NOAUTH", "WRONGPASS")
        or "HELLO must be called" in str(exc)
    ):
        return RedisAuthError(
            f"{at} refused toolq's credentials (wrong or missing password, or unknown user): "
            "set them in TOOLQ_REDIS_URL (redis://user:password@host:port/db)"
        )
    if isinstance(exc, redis_errors.NoPermissionError) or reply == "NOPERM":
        return RedisPermissionError(
            f"{at} refused a command to toolq's user ({_first_line(exc)}): give the user the "
            "rights of its role (redis-users.conf.example)"
        )
    if isinstance(exc, redis.ConnectionError | redis.TimeoutError | OSError):
        return RedisUnavailableError(f"{at} does not answer ({_first_line(exc)})")
    return None


@contextmanager
def translated(where: str = "", *, unreachable: bool = True) -> Iterator[None]:
    """Raise the toolq error (``store_error``) of a Redis failure in the block.

    With ``unreachable=False`` a Redis that does not answer raises redis-py's own
    ``ConnectionError`` or ``TimeoutError`` as before (callers such as a cell's guard name
    it); refusals, credentials and ACL failures are translated all the same.
    """
    try:
        yield
    except redis.RedisError as exc:
        error = store_error(exc, where)
        if error is None or (not unreachable and isinstance(error, RedisUnavailableError)):
            raise
        raise error from exc
