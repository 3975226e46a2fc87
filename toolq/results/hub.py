"""``EventHub``: one reader per process fans new events out to the local listeners of a run.

However many event streams a process serves, one ``XREAD BLOCK`` over every followed run's
stream waits for new events (a new run interrupts it to join), and a few pooled connections
serve the backlog reads.

The guarantee of ``EventLog.follow`` holds: when a listener joins, the hub first records
the run's newest id (unless it already follows the run), then the listener reads its own
backlog from its start id. Every event up to that recorded id is in the backlog; every
later one reaches the listener through the hub. Listeners skip ids they already have.
The hub's cursor per run moves only past events it has handed out, so an interrupted or
failed read loses nothing: the next read starts from the same cursor.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from typing import Any

import redis
import redis.asyncio

from toolq.errors import OverloadedError
from toolq.keys import Keys
from toolq.models import Event
from toolq.results.cold import ColdStore
from toolq.results.connection import RedisTarget, as_text, async_redis_client
from toolq.results.events import (
    BATCH,
    CONFIRM_RETRY_SECONDS,
    POLL_SECONDS,
    check_stream_id,
    parse_entry,
    stream_id_key,
    vouched,
)
from toolq.results.replication import ReplicaAcks

log = logging.getLogger("toolq.hub")

QUEUE_SIZE = 1000
"""Events buffered per listener; a listener that falls further behind re-reads the stream."""
READ_CONNECTIONS = 4
"""Pooled connections for backlog reads (the hub's blocking ``XREAD`` has one more)."""
PAUSE_PER_STREAM_SECONDS = 5e-6
"""After a read that returned events, the hub waits this long per followed run before the
next read. One ``XREAD`` costs Redis about 0.75 µs per stream it names (750 µs for 1,000
streams, measured on Redis 7.0), so under steady traffic the hub's reads stay below ~15% of a
Redis core however many runs it follows, at up to 5 ms of added latency for 1,000 runs
(50 µs for 10)."""
RETRY_AFTER_SECONDS = 5
"""``Retry-After`` suggested to a client refused because every stream slot is taken."""


class Listener:
    """One open event stream: a bounded queue the hub fills, and a flag when it overflowed."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.queue: asyncio.Queue[Event] = asyncio.Queue(QUEUE_SIZE)
        self.lagged = False
        """Set when an event did not fit; the hub offers nothing more until it is cleared."""

    def offer(self, event: Event) -> None:
        """Queue ``event``, or mark the listener lagged (it re-reads from its last id)."""
        if self.lagged:
            return
        try:
            self.queue.put_nowait(event)
        except asyncio.QueueFull:
            self.lagged = True


@dataclass
class _Run:
    listeners: set[Listener] = field(default_factory=set)
    cursor: str | None = None
    """Newest id the hub has read (and delivered); ``None`` until the first joiner sets it."""


class EventHub:
    """Serves every event stream of one process from one reader."""

    def __init__(self, where: RedisTarget | str, keys: Keys, max_streams: int) -> None:
        self.target = RedisTarget.of(where)
        self.keys = keys
        self.max_streams = max_streams
        self._redis: redis.asyncio.Redis | None = None
        self._runs: dict[str, _Run] = {}
        self._by_stream: dict[str, str] = {}
        self._count = 0
        self.cold: ColdStore | None = None
        """The history store: a run whose stream left Redis is read from it."""
        self.acks: ReplicaAcks | None = None
        """With ``TOOLQ_MIN_REPLICAS_ACK``: reads carry a fence, and a final event the
        replicas do not hold is handed out only once they do (``vouched``)."""
        self._running = False
        self._task: asyncio.Task[None] | None = None
        self._joined = asyncio.Event()
        """Set when a run joins, to interrupt the blocking read so it reads that run too."""
        self.draining = False
        """Set when the process shuts down: event streams end, and clients resume elsewhere
        (or here, after a restart) with ``Last-Event-ID``."""

    @property
    def streams(self) -> int:
        """Listeners now open."""
        return self._count

    @property
    def redis(self) -> redis.asyncio.Redis:
        """The hub's asyncio client (created in the running loop on first use)."""
        if self._redis is None:
            self._redis = async_redis_client(self.target, READ_CONNECTIONS + 1)
        return self._redis

    def check_capacity(self) -> None:
        """Raise ``OverloadedError`` when ``max_streams`` listeners are open."""
        if self._count >= self.max_streams:
            raise OverloadedError(
                f"this API process serves {self.max_streams} event streams already; retry later",
                retry_after=RETRY_AFTER_SECONDS,
            )

    async def join(self, run_id: str, after: str | None) -> tuple[Listener, list[Event]]:
        """A new listener of ``run_id`` and its backlog (events after ``after``)."""
        if after is not None:
            check_stream_id(after)
        self.check_capacity()
        listener = Listener(run_id)
        run = self._runs.get(run_id)
        if run is None:
            run = self._runs[run_id] = _Run()
            self._by_stream[self.keys.run_stream(run_id)] = run_id
        run.listeners.add(listener)
        self._count += 1
        if not self._running:
            self._running = True
            self._task = asyncio.get_running_loop().create_task(self._loop())
        try:
            if run.cursor is None:
                newest, held = await self._fenced(
                    "xrevrange", self.keys.run_stream(run_id), count=1
                )
                if held and run.cursor is None:  # another joiner may have set it meanwhile
                    run.cursor = as_text(newest[0][0]) if newest else "0-0"
                    self._joined.set()
            backlog = await self.read(run_id, after)
            if run.cursor is None:  # the newest event was not confirmed: on from the backlog
                run.cursor = backlog[-1].id if backlog else (after or "0-0")
                self._joined.set()
        except BaseException:
            self.leave(listener)
            raise
        return listener, backlog

    def leave(self, listener: Listener) -> None:
        """Forget ``listener``; the hub stops reading a run nobody listens to."""
        run = self._runs.get(listener.run_id)
        if run is None or listener not in run.listeners:
            return
        run.listeners.discard(listener)
        self._count -= 1
        if not run.listeners:
            del self._runs[listener.run_id]
            self._by_stream.pop(self.keys.run_stream(listener.run_id), None)

    async def read(self, run_id: str, after: str | None) -> list[Event]:
        """Events of a run strictly after ``after``, from the stream (or the history store).

        A read cut before a final event the replicas do not hold (``vouched``) moves the
        hub's cursor of the run back to where it ends, if the hub was past it: the hub reads
        that event again, and hands it out once confirmed (re-sent events are skipped by id).
        """
        start = f"({after}" if after else "-"
        stream = self.keys.run_stream(run_id)
        out: list[Event] = []
        cold = self.cold
        if cold is not None and not await self.redis.exists(stream):
            archived = await asyncio.to_thread(cold.events, run_id, after)
            return [parse_entry(run_id, event_id, fields) for event_id, fields in archived]
        position = after or "0-0"
        while True:
            entries, held = await self._fenced("xrange", stream, min=start, max="+", count=BATCH)
            shown, cut = vouched([parse_entry(run_id, eid, f) for eid, f in entries], held)
            out.extend(shown)
            position = shown[-1].id if shown else position
            if cut:
                self._back_to(run_id, position)
                return out
            if len(entries) < BATCH:
                return out
            start = f"({as_text(entries[-1][0])}"

    def _back_to(self, run_id: str, position: str) -> None:
        """Move the hub's cursor of ``run_id`` back to ``position`` if it is past it."""
        run = self._runs.get(run_id)
        cursor = run.cursor if run is not None else None
        if run is not None and cursor is not None:
            run.cursor = min(cursor, position, key=stream_id_key)

    async def _fenced(self, method: str, *args: Any, **kwargs: Any) -> tuple[Any, bool]:
        """The client's ``method(*args, **kwargs)``, and whether the replicas hold its read.

        With ``min_replicas_ack`` the read and a fence (``ReplicaAcks``) go in one pipeline
        (``EventLog._fenced``); without, it is sent alone (and held).
        """
        if self.acks is None or not self.acks.enabled:
            return await getattr(self.redis, method)(*args, **kwargs), True
        pipe = self.redis.pipeline(transaction=False)
        getattr(pipe, method)(*args, **kwargs)
        self.acks.fence(pipe)
        replies = await pipe.execute()
        return replies[0], self.acks.held(replies)

    async def _loop(self) -> None:
        try:
            while self._runs:
                try:
                    await self._deliver()
                except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
                    # Redis restarted: read again from the cursors; the streams still
                    # hold whatever was added meanwhile.
                    log.warning("event hub lost Redis (%s); reconnecting", exc)
                    await asyncio.sleep(0.2)
                except redis.RedisError as exc:
                    # e.g. a key of the wrong type: keep serving the other runs.
                    log.warning("event hub read failed (%s); retrying", exc)
                    await asyncio.sleep(0.5)
        finally:
            # Nobody listens: stop reading (a later joiner starts a new loop).
            self._running = False

    async def _deliver(self) -> None:
        """One ``XREAD BLOCK`` over every followed run; its events handed to the listeners.

        Waits at most ``POLL_SECONDS`` (so runs left meanwhile stop being read) or until a
        run joins. An interrupted read is dropped with its connection; nothing is lost, as
        the cursors move only past events handed out.
        """
        streams: dict[str, str] = {
            self.keys.run_stream(run_id): run.cursor
            for run_id, run in self._runs.items()
            if run.cursor is not None
        }
        self._joined.clear()
        if not streams:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._joined.wait(), POLL_SECONDS)
            return
        read = asyncio.ensure_future(
            self._fenced("xread", streams, count=BATCH, block=int(POLL_SECONDS * 1000))
        )
        joined = asyncio.ensure_future(self._joined.wait())
        try:
            await asyncio.wait({read, joined}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            read.cancel()
            raise
        finally:
            joined.cancel()
        if not read.done():
            # A run joined: read again with it. A reply that raced the cancel is dropped
            # too; the cursors did not move, so the next read returns it.
            read.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await read
            return
        reply, held = read.result()
        for raw_stream, entries in reply or []:
            stream = as_text(raw_stream)
            run_id = self._by_stream.get(stream)
            run = self._runs.get(run_id) if run_id is not None else None
            if run is None or not entries or run.cursor != streams.get(stream):
                continue
            # a final event not confirmed yet: the next read starts before it
            events, _ = vouched([parse_entry(run_id or "", i, f) for i, f in entries], held)
            if not events:
                continue
            run.cursor = events[-1].id
            for listener in list(run.listeners):
                for event in events:
                    listener.offer(event)
        if reply:
            pause = len(streams) * PAUSE_PER_STREAM_SECONDS
            await asyncio.sleep(pause if held else max(pause, CONFIRM_RETRY_SECONDS))

    async def close(self) -> None:
        """Stop the reader and close the connections."""
        self._runs.clear()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        if self._redis is not None:
            await self._redis.aclose()
            self._redis = None
