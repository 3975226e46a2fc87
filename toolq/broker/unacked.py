"""kombu's bookkeeping of taken, unacknowledged messages (its Redis transport's QoS).

kombu's ``BRPOP`` takes a message off its queue, then records it in the ``unacked`` hash
(delivery tag → ``[message, exchange, routing key]``) and the ``unacked_index`` sorted set
(delivery tag → when it was taken). An acknowledgement removes both; kombu restores an
entry to its queue after the visibility timeout. toolq only reads them: the sweeper finds
messages a worker took and never started, and messages taken and never recorded.
"""

from __future__ import annotations

import json
from typing import Any

import redis

from toolq.broker.messages import Delivery, decode
from toolq.keys import KOMBU_UNACKED, KOMBU_UNACKED_INDEX


def taken_before(client: redis.Redis, cutoff: float, limit: int) -> list[tuple[str, Delivery]]:
    """``(delivery tag, message)`` of toolq's messages taken before ``cutoff`` and not acked.

    At most ``limit`` entries are looked at, oldest first; other tasks' entries are skipped.
    """
    tags: Any = client.zrangebyscore(KOMBU_UNACKED_INDEX, 0, cutoff, start=0, num=limit)
    if not tags:
        return []
    entries: Any = client.hmget(KOMBU_UNACKED, tags)
    taken = []
    for tag, entry in zip(tags, entries, strict=True):
        found = _decode_entry(entry)
        if found is not None:
            taken.append((tag.decode() if isinstance(tag, bytes) else str(tag), found))
    return taken


def queue_holds(pipe: redis.client.Pipeline, delivery_tag: str) -> None:
    """Queue on ``pipe`` whether an entry for ``delivery_tag`` exists (one reply, an int)."""
    pipe.hexists(KOMBU_UNACKED, delivery_tag or "-")


def _decode_entry(entry: bytes | None) -> Delivery | None:
    """The message of one ``unacked`` entry, if it is toolq's."""
    if entry is None:
        return None
    try:
        message = json.loads(entry)[0]
    except (ValueError, IndexError, KeyError, TypeError):
        return None
    return decode(message) if isinstance(message, dict) else None
