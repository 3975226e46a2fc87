"""``HeldConnections``: kombu's bookkeeping writes on a connection each thread holds.

kombu writes through its channel's redis-py client: every write checks a connection out of
the pool and back in (a readiness poll of the socket, metrics hooks) around its round trip,
about 45 µs of CPU for a ``ZADD`` and an ``HSET``. A worker's consumer writes such an entry
for every message it takes (``toolq.broker.app``); on a connection the thread keeps it is a
send and a read. Errors are redis-py's: a lost connection is retried with the connection's
own backoff (the writes are safe to repeat), a reply that is an error is raised once every
reply is read, so the connection stays in step.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from hiredis import pack_command  # redis-py's own packer (``redis[hiredis]``)
from redis.exceptions import ResponseError


class HeldConnections:
    """Sends commands on one connection per thread, made like those of ``pool``."""

    def __init__(self, pool: Any) -> None:
        self.pool = pool
        self._local = threading.local()

    def _connection(self) -> Any:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self.pool.connection_class(**self.pool.connection_kwargs)
            self._local.conn = conn
        return conn

    def send(self, commands: Sequence[tuple[Any, ...]]) -> list[Any]:
        """The replies of ``commands``, sent in one write: a pipeline without ``MULTI``."""
        conn = self._connection()
        packed = [pack_command(command) for command in commands]

        def attempt() -> list[Any]:
            conn.send_packed_command(packed)
            replies: list[Any] = []
            for _ in commands:
                try:
                    replies.append(conn.read_response())
                except ResponseError as exc:
                    replies.append(exc)
            for reply in replies:
                if isinstance(reply, ResponseError):
                    raise reply
            return replies

        replies: list[Any] = conn.retry.call_with_retry(attempt, lambda _error: conn.disconnect())
        return replies
