"""``Outbox``: the Redis side of webhook delivery, from outbox stream to delivered.

Events enter the outbox stream in the script that writes them (``lib/emit.lua``), only for
the event types in ``Keys.webhook_events``, which workers with webhooks keep announcing. A
worker reads the stream in a consumer group and fans each entry out, in one MULTI with its
acknowledgement, into one delivery record per endpoint, scheduled in ``Keys.webhook_due``.
A delivery record names the event (run and stream entry id), not its content: any Redis
client can write the outbox and the records, so what is sent is read again at each attempt
(``toolq.webhooks.provenance``).
An entry read by a worker that died before fanning it out is claimed by another after
``STALE_ENTRY_MS``. A delivery is claimed for one attempt by moving its due time past the
attempt's end, so a worker killed mid-attempt leaves it due again soon after; deliveries are
at least once, and receivers drop a delivery id they have already handled.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import redis

from toolq.keys import WEBHOOK_GROUP, Keys
from toolq.models import EventType
from toolq.results import groups
from toolq.results.connection import as_text
from toolq.results.runner import Scripts
from toolq.results.scripts import WEBHOOK_CLAIM

log = logging.getLogger("toolq.webhooks")

STALE_ENTRY_MS = 60_000
"""An outbox entry read but not fanned out for this long is taken over by another worker."""
BATCH = 100
DEAD_KEPT = 1000
"""Given-up deliveries kept for inspection (``Keys.webhook_dead``)."""


class Endpoint(Protocol):
    """Where deliveries go: a ``Webhook``, or a sink such as the Slack app (``Sink``)."""

    @property
    def id(self) -> str:
        """Stable name of the endpoint in delivery records."""
        ...

    @property
    def events(self) -> list[EventType]:
        """The event types it takes."""
        ...


@dataclass(frozen=True)
class Claimed:
    """A delivery taken for one attempt: which event of which run, for which endpoint.

    ``type`` and ``call_id`` are as the outbox said (for the dead-letter list); what is sent
    is read again from the run's stream (``Provenance``).
    """

    delivery_id: str
    hook_id: str
    attempts: int
    run_id: str
    event_id: str
    type: str
    call_id: str
    purpose: str = ""
    """Why a delivery scheduled by its endpoint (``Outbox.schedule``) is due: e.g. a
    reminder of the event's call; empty for the event's own notification."""


class Outbox:
    """Reads the outbox stream and keeps the delivery records of one worker's endpoints."""

    def __init__(self, client: redis.Redis, keys: Keys, consumer: str) -> None:
        self.redis = client
        self.keys = keys
        self.consumer = consumer
        self.scripts = Scripts(client)

    def announce(self, events: Iterable[str], hold_seconds: int) -> None:
        """Have the state-change scripts put these event types in the outbox (for a while)."""
        wanted = sorted(set(events))
        if not wanted:
            return
        pipe = self.redis.pipeline(transaction=True)
        pipe.sadd(self.keys.webhook_events, *wanted)
        pipe.expire(self.keys.webhook_events, hold_seconds)
        pipe.execute()

    def ensure_group(self) -> None:
        """Create the consumer group (from the stream's start: nothing already in it is lost)."""
        groups.ensure_group(self.redis, self.keys.webhook_outbox, WEBHOOK_GROUP)

    def take(self, block_ms: int | None) -> list[groups.Entry]:
        """Entries to fan out: stale ones of dead consumers first, then new ones."""
        entries = groups.take(
            self.redis,
            self.keys.webhook_outbox,
            WEBHOOK_GROUP,
            self.consumer,
            idle_ms=STALE_ENTRY_MS,
            count=BATCH,
            block_ms=block_ms,
        )
        # an entry deleted while pending comes back empty: nothing to fan out
        return [(entry_id, fields) for entry_id, fields in entries if fields]

    def fan_out(
        self, entries: list[tuple[str, dict[str, str]]], hooks: Iterable[Endpoint], now: float
    ) -> int:
        """Turn entries into deliveries, one per endpoint that wants its event; how many."""
        if not entries:
            return 0
        k = self.keys
        hooks = list(hooks)
        pipe = self.redis.pipeline(transaction=True)
        made = 0
        for entry_id, fields in entries:
            for hook in hooks:
                if fields.get("type") not in {e.value for e in hook.events}:
                    continue
                delivery_id = f"{entry_id}.{hook.id}"
                record = {
                    **{f: fields.get(f, "") for f in ("type", "call_id", "run_id", "event_id")},
                    "hook": hook.id,
                    "attempts": "0",
                }
                pipe.hset(k.webhook_delivery(delivery_id), mapping=dict[Any, Any](record))
                pipe.zadd(k.webhook_due, {delivery_id: now}, nx=True)
                made += 1
        ids = [entry_id for entry_id, _ in entries]
        pipe.xack(k.webhook_outbox, WEBHOOK_GROUP, *ids)
        pipe.xdel(k.webhook_outbox, *ids)
        pipe.execute()
        return made

    def schedule(self, claimed: Claimed, delivery_id: str, purpose: str, at: float) -> bool:
        """A further delivery of ``claimed``'s event to its endpoint, due at ``at``.

        The endpoint learns why from ``Claimed.purpose``. A delivery of that id already
        pending keeps its due time (False then).
        """
        record = {
            "type": claimed.type,
            "call_id": claimed.call_id,
            "run_id": claimed.run_id,
            "event_id": claimed.event_id,
            "hook": claimed.hook_id,
            "attempts": "0",
            "purpose": purpose,
        }
        pipe = self.redis.pipeline(transaction=True)
        pipe.hset(self.keys.webhook_delivery(delivery_id), mapping=dict[Any, Any](record))
        pipe.zadd(self.keys.webhook_due, {delivery_id: at}, nx=True)
        return bool(pipe.execute()[1])

    def next_due(self) -> float | None:
        """When the earliest pending delivery is due."""
        first: Any = self.redis.zrange(self.keys.webhook_due, 0, 0, withscores=True)
        return float(first[0][1]) if first else None

    def due(self, now: float, limit: int) -> list[str]:
        """Ids of deliveries due by ``now``."""
        raw: Any = self.redis.zrangebyscore(self.keys.webhook_due, 0, now, start=0, num=limit)
        return [as_text(d) for d in raw]

    def claim(self, delivery_id: str, now: float, until: float) -> Claimed | None:
        """Take a due delivery for one attempt ending by ``until``; None if it is not due."""
        f = self.scripts.run(
            WEBHOOK_CLAIM(keys=self.keys, delivery_id=delivery_id, now=repr(now), until=repr(until))
        )
        if f is None:
            return None
        return Claimed(
            delivery_id=delivery_id,
            hook_id=f.get("hook", ""),
            attempts=int(f.get("attempts", "1")),
            run_id=f.get("run_id", ""),
            event_id=f.get("event_id", ""),
            type=f.get("type", ""),
            call_id=f.get("call_id", ""),
            purpose=f.get("purpose", ""),
        )

    def delivered(self, delivery_id: str) -> None:
        """Forget a delivery the endpoint accepted."""
        pipe = self.redis.pipeline(transaction=True)
        pipe.delete(self.keys.webhook_delivery(delivery_id))
        pipe.zrem(self.keys.webhook_due, delivery_id)
        pipe.execute()

    def retry_at(self, delivery_id: str, at: float, error: str) -> None:
        """Schedule the next attempt of a delivery that failed."""
        pipe = self.redis.pipeline(transaction=True)
        pipe.hset(self.keys.webhook_delivery(delivery_id), "last_error", error)
        pipe.zadd(self.keys.webhook_due, {delivery_id: at}, xx=True)
        pipe.execute()

    def postpone(self, delivery_id: str, at: float, why: str) -> None:
        """Put a claimed delivery off until ``at`` without counting the attempt.

        The endpoint was not tried: its event is not confirmed by the replicas yet.
        """
        pipe = self.redis.pipeline(transaction=True)
        pipe.hincrby(self.keys.webhook_delivery(delivery_id), "attempts", -1)
        pipe.hset(self.keys.webhook_delivery(delivery_id), "last_error", why)
        pipe.zadd(self.keys.webhook_due, {delivery_id: at}, xx=True)
        pipe.execute()

    def give_up(self, claimed: Claimed, error: str) -> None:
        """Drop a delivery out of attempts, keeping a summary in the dead-letter list."""
        summary = json.dumps(
            {
                "id": claimed.delivery_id,
                "hook": claimed.hook_id,
                "type": claimed.type,
                "call_id": claimed.call_id,
                "attempts": claimed.attempts,
                "error": error,
            }
        )
        pipe = self.redis.pipeline(transaction=True)
        pipe.lpush(self.keys.webhook_dead, summary)
        pipe.ltrim(self.keys.webhook_dead, 0, DEAD_KEPT - 1)
        pipe.delete(self.keys.webhook_delivery(claimed.delivery_id))
        pipe.zrem(self.keys.webhook_due, claimed.delivery_id)
        pipe.execute()
