"""``HeldConnection``: kombu's record of a taken message on a connection its thread keeps.

The consumer records every message it takes (``toolq.broker.app._record_taken``). Checked out
of the channel's pool and back in for each message, that write paid for the pool's lock, its
fork check and a readiness poll of the socket (a system call) around its round trip; on a
connection the consumer's thread keeps, it is a send and a read. The connection is made as
the pool makes its own (same class, same arguments), and a channel's new pool (after a
reconnect) gets a new one.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from redis import exceptions as redis_errors

from toolq import redis_wire


class HeldConnection:
    """One connection per thread, made like those of ``pool``, for writes safe to repeat."""

    def __init__(self, pool: Any) -> None:
        self.pool = pool
        self._local = threading.local()

    def write(self, commands: Sequence[tuple[Any, ...]]) -> list[Any]:
        """``redis_wire.write`` of ``commands`` on this thread's connection: their replies.

        A connection found closed (the server restarted, or dropped it while idle) is made
        again and the commands sent once more, as the pool's checkout would have replaced
        it; a second loss is raised (kombu's connections retry nothing), and so is any
        other failure, the connection then starting afresh on next use.
        """
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self.pool.connection_class(**self.pool.connection_kwargs)
            self._local.conn = conn
        try:
            try:
                return redis_wire.write(conn, commands)
            except redis_errors.ConnectionError:
                conn.disconnect()
                return redis_wire.write(conn, commands)
        except BaseException:
            conn.disconnect()  # replies may be left unread
            raise

    def close(self) -> None:
        """Close this thread's connection, if it made one."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.disconnect()
            self._local.conn = None


def held_for(channel: Any) -> HeldConnection:
    """The ``HeldConnection`` of a kombu Redis channel's pool (a new one with a new pool).

    ``channel.pool`` is read first, as kombu's own client reads it: a closed channel raises
    there (``toolq.broker.app._connparams_unless_closed``).
    """
    pool = channel.pool
    held: HeldConnection | None = channel.__dict__.get("_toolq_held")
    if held is None or held.pool is not pool:
        if held is not None:
            held.close()
        held = HeldConnection(pool)
        channel.__dict__["_toolq_held"] = held
    return held
