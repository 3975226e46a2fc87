"""Commands written to a redis-py connection as one buffer, their replies read back in step.

What a pipeline without ``MULTI`` does, less redis-py's per-command and per-pipeline work
(response callbacks, event hooks, the pipeline object): the worker's scripts
(``toolq.results.direct``) and kombu's record of a taken message (``toolq.broker.app``)
are sent this way.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from redis.exceptions import ResponseError

_pack: Callable[[tuple[Any, ...]], bytes] | None
try:  # the C packer redis-py itself uses when hiredis is installed
    from hiredis import pack_command as _pack
except ImportError:  # pragma: no cover - hiredis is a dependency
    _pack = None


def packed(conn: Any, commands: Sequence[tuple[Any, ...]]) -> list[bytes]:
    """``commands`` in one buffer: one ``send`` for all (redis-py sends each item apart)."""
    out: list[bytes] = []
    for command in commands:
        out.extend([_pack(command)] if _pack is not None else conn.pack_command(*command))
    return [b"".join(out)]


def read_all(conn: Any, count: int) -> list[Any]:
    """``count`` replies, every one read before any error is raised (``conn`` stays in step)."""
    replies: list[Any] = []
    for _ in range(count):
        try:
            replies.append(conn.read_response())
        except ResponseError as exc:
            replies.append(exc)
    return replies


def raise_first(replies: Sequence[Any]) -> None:
    """Raise the first error among ``replies``."""
    for reply in replies:
        if isinstance(reply, ResponseError):
            raise reply


def write(conn: Any, commands: Sequence[tuple[Any, ...]]) -> list[Any]:
    """``commands`` in one write on ``conn``, retried with its client's backoff; their replies.

    For writes that are safe to repeat: a lost connection sends them all again.
    """
    buffer = packed(conn, commands)

    def attempt() -> list[Any]:
        conn.send_packed_command(buffer)
        return read_all(conn, len(commands))

    replies: list[Any] = conn.retry.call_with_retry(attempt, lambda _error: conn.disconnect())
    raise_first(replies)
    return replies
