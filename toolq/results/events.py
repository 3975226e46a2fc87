"""``EventLog``: read a run's event stream, follow it live, and wait for calls to finish.

Readers read the stream from their last id, then block on the stream itself
(``XREAD BLOCK`` from that id), which every ``XADD`` wakes: nothing is published besides
the events, and a reader can miss nothing between its read and its wait. Waits for calls to
turn final go through the process's one shared reader (``toolq.results.waits``).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import redis

from toolq.errors import PayloadError, WaitTimeoutError
from toolq.keys import Keys
from toolq.models import FINAL_STATUSES, Event, EventType
from toolq.results.cold import ColdStore
from toolq.results.connection import as_text
from toolq.results.replication import ReplicaAcks
from toolq.results.waits import SharedWaits, Waiter
from toolq.settings import LONGEST_BLOCK_SECONDS

POLL_SECONDS = 1.0
"""Longest single ``XREAD BLOCK`` of the API's hub, so a run nobody follows is dropped."""
BLOCK_SECONDS = LONGEST_BLOCK_SECONDS
"""Longest single ``XREAD BLOCK`` of a reader, so its deadline is checked now and then; under
the socket timeout (``redis_socket_timeout``), which a longer block would hit (a
``TimeoutError``, retried by the client without looking at the reader's deadline)."""
BATCH = 1000
CONFIRM_RETRY_SECONDS = 0.1
"""Pause before a follower reads again a final event the replicas did not confirm."""

_FINAL_VALUES = frozenset(s.value for s in FINAL_STATUSES)


_STREAM_ID = re.compile(r"[0-9]{1,20}(-[0-9]{1,20})?")


def check_stream_id(value: str) -> str:
    """``value`` if it is a stream id (``<ms>-<seq>`` or ``<ms>``); else ``PayloadError``."""
    if not _STREAM_ID.fullmatch(value) or max(stream_id_key(value)) >= 2**64:
        raise PayloadError(f"{value[:64]!r} is not an event id (expected <ms>-<seq>, e.g. 1-0)")
    if stream_id_key(value) == (2**64 - 1, 2**64 - 1):
        # Redis refuses a range from after the largest id ("invalid start ID for the interval").
        raise PayloadError(f"no event comes after {value!r}, the largest stream id")
    return value


def stream_id_key(value: str) -> tuple[int, int]:
    """A stream id as a sortable pair (``<ms>`` alone counts as ``<ms>-0``)."""
    ms, _, seq = value.partition("-")
    return int(ms), int(seq or 0)


def parse_entry(run_id: str, entry_id: Any, fields: dict[Any, Any]) -> Event:
    """An ``Event`` from one stream entry."""
    f = {as_text(k): as_text(v) for k, v in fields.items()}
    return Event(
        id=as_text(entry_id),
        type=EventType(f["type"]),
        run_id=run_id,
        call_id=f["call_id"],
        ts=float(f.get("ts", 0) or 0),
        data=json.loads(f.get("data") or "{}"),
    )


def vouched(events: list[Event], held: bool) -> tuple[list[Event], bool]:
    """The events of a fenced read that may be reported, and whether any was held back.

    All of them when the replicas hold what was read (``ReplicaAcks.held``); else those
    before the first final event, which a failover could take back: the reader reads from
    there again, and reports it once confirmed.
    """
    if not held:
        for i, event in enumerate(events):
            if event.type.is_final:
                return events[:i], True
    return events, False


class EventLog:
    """Reads event streams of runs."""

    def __init__(self, client: redis.Redis, keys: Keys) -> None:
        self.redis = client
        self.keys = keys
        self.waits = SharedWaits(client, keys)
        """The waits of this process on this Redis: one reader thread and connection for all."""
        self.cold: ColdStore | None = None
        """The history store a run's events are read from once its stream left Redis."""
        self.acks: ReplicaAcks | None = None
        """With ``TOOLQ_MIN_REPLICAS_ACK``: every read carries a fence, and a final event the
        replicas do not hold is not reported until they do (``vouched``)."""

    def _fenced(self, method: str, *args: Any, **kwargs: Any) -> tuple[Any, bool]:
        """The client's ``method(*args, **kwargs)``, and whether the replicas hold its read.

        With ``min_replicas_ack`` the read and a fence (``ReplicaAcks``) go in one pipeline;
        without, it is sent alone (and held).
        """
        if self.acks is None or not self.acks.enabled:
            return getattr(self.redis, method)(*args, **kwargs), True
        pipe = self.redis.pipeline(transaction=False)
        getattr(pipe, method)(*args, **kwargs)
        self.acks.fence(pipe)
        replies = pipe.execute()
        return replies[0], self.acks.held(replies)

    def read(self, run_id: str, after: str | None = None, count: int | None = None) -> list[Event]:
        """Events of a run strictly after ``after`` (all of them when ``None``), in order.

        A run whose stream left Redis (its hot window passed) is read from the history store.
        """
        start = f"({check_stream_id(after)}" if after else "-"
        if self.cold is not None and not self.redis.exists(self.keys.run_stream(run_id)):
            return [
                parse_entry(run_id, event_id, fields)
                for event_id, fields in self.cold.events(run_id, after, count)
            ]
        out: list[Event] = []
        stream = self.keys.run_stream(run_id)
        while True:
            limit = BATCH if count is None else min(BATCH, count - len(out))
            if limit <= 0:
                return out
            entries, held = self._fenced("xrange", stream, min=start, max="+", count=limit)
            shown, cut = vouched([parse_entry(run_id, eid, f) for eid, f in entries], held)
            out.extend(shown)
            if cut or len(entries) < limit:
                return out
            start = f"({as_text(entries[-1][0])}"

    def last_id(self, run_id: str) -> str | None:
        """Id of the newest event of a run."""
        entries = self.redis.xrevrange(self.keys.run_stream(run_id), count=1)
        return as_text(entries[0][0]) if entries else None

    def follow(
        self,
        run_id: str,
        after: str | None = None,
        *,
        stop: Callable[[Event], bool] | None = None,
        timeout: float | None = None,
    ) -> Iterator[Event]:
        """Every event after ``after``, then new ones as they come, until ``stop`` or timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        stream = self.keys.run_stream(run_id)
        last = after
        for event in self.read(run_id, last):
            last = event.id
            yield event
            if stop is not None and stop(event):
                return
        while True:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return
            block = BLOCK_SECONDS if remaining is None else min(BLOCK_SECONDS, remaining)
            reply, held = self._fenced(
                "xread", {stream: last or "0-0"}, count=BATCH, block=max(1, int(block * 1000))
            )
            for _, entries in reply or []:
                shown, cut = vouched([parse_entry(run_id, i, f) for i, f in entries], held)
                for event in shown:
                    last = event.id
                    yield event
                    if stop is not None and stop(event):
                        return
                if cut:  # read again from before the final event, once confirmed
                    time.sleep(CONFIRM_RETRY_SECONDS)

    def wait_final(
        self,
        run_id: str,
        call_ids: Sequence[str],
        timeout: float | None,
        *,
        after: str | None = None,
        final: set[str] | None = None,
    ) -> dict[str, dict[str, Any]]:
        """Block until every call is final, woken by the process's shared stream reader.

        One pipelined round trip reads the newest stream id and then the calls' states;
        Redis runs them in that order, so a call that turns final after its state was read
        shows up in the stream after that id, which the reader (``SharedWaits``) reads on:
        there is nothing to miss and nothing to poll, and however many threads wait, the
        waiting holds one connection.

        A caller that just created the calls passes ``after`` (the first creation event)
        and ``final`` (the calls created final), and saves the lookup. Returns the data of
        the final events read, by call id.
        """
        waiter = self.start_wait(run_id, call_ids, after=after, final=final)
        if not self.waits.wait(waiter, timeout):
            raise WaitTimeoutError(
                f"{len(waiter.pending)} of {len(call_ids)} calls not final after {timeout:g}s",
                pending=sorted(waiter.pending),
            )
        return waiter.seen

    def start_wait(
        self,
        run_id: str,
        call_ids: Sequence[str],
        *,
        after: str | None = None,
        final: set[str] | None = None,
        inbox: str | None = None,
    ) -> Waiter:
        """Register a wait for the calls (``wait_final`` without the blocking part).

        ``inbox``: the inbox the calls created at ``after`` notify (``Dispatched.notify``),
        or ``None``.
        """
        if after is not None:
            pending = set(call_ids) - (final or set())
            return self.waits.join_inbox(run_id, pending, after, inbox)
        pipe = self.redis.pipeline(transaction=False)
        pipe.xrevrange(self.keys.run_stream(run_id), count=1)
        for call_id in call_ids:
            pipe.hget(self.keys.call(call_id), "status")
        newest, *states = pipe.execute()
        last = as_text(newest[0][0]) if newest else "0-0"
        pending = {
            c
            for c, s in zip(call_ids, states, strict=True)
            if s is None or as_text(s) not in _FINAL_VALUES
        }
        gone = [c for c, s in zip(call_ids, states, strict=True) if s is None]
        if gone and self.cold is not None:
            archived = self.cold.records(gone)
            pending -= {c for c, r in archived.items() if r.get("status") in _FINAL_VALUES}
        return self.waits.join(run_id, pending, last)

    def close(self) -> None:
        """Stop the shared reader, if one was started."""
        self.waits.close()
