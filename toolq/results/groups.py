"""A stream read as one consumer of a group: the webhook outbox's and the history archive's way.

Entries a consumer read but did not acknowledge for ``idle_ms`` (its process died) are
claimed by the next consumer that reads, before any new entry.
"""

from __future__ import annotations

from typing import Any

import redis

from toolq.results.connection import as_text

Entry = tuple[str, dict[str, str]]
"""A stream entry's id and fields, as text."""


def ensure_group(client: redis.Redis, stream: str, group: str) -> None:
    """Create ``group`` on ``stream`` (and the stream) reading from its start: none is lost.

    A group that exists already is kept as it is.
    """
    try:
        client.xgroup_create(stream, group, id="0", mkstream=True)
    except redis.ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise


def take(
    client: redis.Redis,
    stream: str,
    group: str,
    consumer: str,
    *,
    idle_ms: int,
    count: int,
    block_ms: int | None,
) -> list[Entry]:
    """Entries for ``consumer``: stale ones of dead consumers first, then new ones.

    An entry deleted while pending comes back without fields (to be acknowledged only).
    When the group is gone (the stream was deleted), it is created again and none is taken.
    """
    try:
        stale: Any = client.xautoclaim(stream, group, consumer, idle_ms, "0-0", count=count)
        entries = list(stale[1])
        if not entries:
            reply: Any = client.xreadgroup(
                group, consumer, {stream: ">"}, count=count, block=block_ms
            )
            entries = list(reply[0][1]) if reply else []
    except redis.ResponseError as exc:
        if "NOGROUP" not in str(exc):
            raise
        ensure_group(client, stream, group)
        return []
    return [
        (as_text(entry_id), {as_text(a): as_text(b) for a, b in (fields or {}).items()})
        for entry_id, fields in entries
    ]
