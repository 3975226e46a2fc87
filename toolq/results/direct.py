"""``DirectScripts``: the scripts every call runs, on a connection of each thread's own.

A worker runs START and FINISH once per call (and PROGRESS per streamed value). Through
redis-py's client each costs about 50 µs of CPU beyond the round trip (pool checkout and
release, the retry wrapper, metrics hooks); on a connection held by the thread it is a send
and a read. Connection errors are retried with the client's own backoff, as the pooled
client would: START and FINISH answer a repeat with the same token the way they answered
the first time, so a retry whose first attempt did reach Redis changes nothing (a retried
PROGRESS may append its event twice, as it could through the pooled client).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import redis
from redis.exceptions import NoScriptError

from toolq.redis_wire import packed, raise_first, read_all

if TYPE_CHECKING:
    from toolq.results.runner import Invocation


class DirectScripts:
    """Runs script invocations with ``EVALSHA`` on one connection per thread."""

    def __init__(self, client: redis.Redis) -> None:
        self.pool = client.connection_pool
        self._local = threading.local()

    def _connection(self) -> Any:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self.pool.connection_class(**self.pool.connection_kwargs)
            self._local.conn = conn
        return conn

    def __call__(self, invocation: Invocation[Any]) -> Any:
        """The raw reply; loads the script and runs it again if Redis lost it (a restart)."""
        return self.then([invocation], ())[0]

    def then(
        self, invocations: Sequence[Invocation[Any]], after: Sequence[tuple[Any, ...]]
    ) -> list[Any]:
        """The scripts' raw replies and those of the ``after`` commands, sent in one write.

        ``after`` rides on the same connection (``ReplicaAcks``: ``WAIT`` must follow the
        writes it waits for there). After a ``NOSCRIPT`` only the invocations that found
        their script missing are sent again (the others ran), with ``after`` behind them.
        """
        return _send(self._connection(), invocations, after)

    def pooled(
        self, invocations: Sequence[Invocation[Any]], after: Sequence[tuple[Any, ...]]
    ) -> list[Any]:
        """``then`` on a connection of the client's pool, held for this round trip only.

        For callers with many threads, each sending now and then (a client's dispatches):
        the pool bounds their connections, and a pipeline's machinery is skipped.
        """
        conn = self.pool.get_connection()
        try:
            return _send(conn, invocations, after)
        finally:
            self.pool.release(conn)

    def close(self) -> None:
        """Close this thread's connection."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.disconnect()
            self._local.conn = None


def _send(
    conn: Any, invocations: Sequence[Invocation[Any]], after: Sequence[tuple[Any, ...]]
) -> list[Any]:
    """``DirectScripts.then`` on ``conn``: retried with the client's backoff on its errors."""
    first = packed(conn, [*(inv.command for inv in invocations), *after])

    def attempt() -> list[Any]:
        conn.send_packed_command(first)
        replies = read_all(conn, len(invocations) + len(after))
        missing = [i for i, r in enumerate(replies[: len(invocations)]) if _no_script(r)]
        if missing:
            for source in {invocations[i].script.source: None for i in missing}:
                conn.send_command("SCRIPT", "LOAD", source)
                conn.read_response()
            conn.send_packed_command(
                packed(conn, [*(invocations[i].command for i in missing), *after])
            )
            again = read_all(conn, len(missing) + len(after))
            for i, reply in zip(missing, again, strict=False):
                replies[i] = reply
            replies[len(invocations) :] = again[len(missing) :]
        raise_first(replies)
        return replies

    replies: list[Any] = conn.retry.call_with_retry(attempt, lambda _error: conn.disconnect())
    return replies


def _no_script(reply: Any) -> bool:
    return isinstance(reply, NoScriptError)
