"""A stream read as one consumer of a group (``toolq.results.groups``), on the suite's Redis."""

from __future__ import annotations

import redis

from toolq.results import groups

STREAM = "t-groups:stream"
GROUP = "readers"


def take(r: redis.Redis, consumer: str, idle_ms: int = 60_000) -> list[groups.Entry]:
    return groups.take(r, STREAM, GROUP, consumer, idle_ms=idle_ms, count=10, block_ms=None)


def test_a_missing_group_is_created_from_the_start_of_the_stream(r: redis.Redis) -> None:
    first = r.xadd(STREAM, {"n": "1"}).decode()
    assert take(r, "a") == []  # the group was not there: made, nothing taken this time
    assert take(r, "a") == [(first, {"n": "1"})]  # the entry written before the group
    groups.ensure_group(r, STREAM, GROUP)  # an existing group is kept, with its position
    assert take(r, "a") == []


def test_a_dead_consumers_entries_are_claimed_before_new_ones(r: redis.Redis) -> None:
    groups.ensure_group(r, STREAM, GROUP)
    read = r.xadd(STREAM, {"n": "1"}).decode()
    assert take(r, "dead") == [(read, {"n": "1"})]  # read, never acknowledged
    new = r.xadd(STREAM, {"n": "2"}).decode()
    assert take(r, "alive", idle_ms=0) == [(read, {"n": "1"})]
    assert take(r, "alive", idle_ms=60_000) == [(new, {"n": "2"})]
