"""``SharedWaits``: one reader per process waits on the event streams of every waiting call.

A thread that waits for calls registers what it waits for and sleeps on a lock of its
``Waiter``; one reader thread, on one connection of its own, blocks in a single
``XREAD BLOCK`` over the streams of every run someone waits on and wakes each waiter whose
calls turned final. However many threads wait, a client holds one connection for all the
waiting, plus its pool's connections for short commands.

The guarantee of ``EventLog.wait_final`` holds: a waiter brings the id it has read its
calls' states up to; the reader's cursor of a run it does not follow yet starts there. When
the reader follows the run already, from an older cursor, it will hand the waiter every
event after that cursor; when from a newer one, the waiter reads the events in between
itself (``XRANGE``). A reader blocked on the other runs is woken by an entry on a wake
stream of its own (one ``XADD`` per new run per read, however many join during it), which
it reads along with the runs: an entry added before the ``XREAD`` arrives still ends it.

The calls this client dispatched and then waits on (``join_inbox``) need no run stream at
all: their records name the reader's inbox (``Keys.wait_inbox``), to which every script that
turns a call final copies the final event (``lib/emit.lua``). The reader reads that one
stream with the others, so a reader with many waiting runs names two streams per read
instead of one per run, a joining waiter needs no wake-up write, and only final events are
read. An inbox entry nobody waits on yet (the call ended before its waiter joined) is kept
in memory for the waiter to come (``ORPHANS`` of them); a waiter whose entry may have been
dropped from there waits on its run's stream instead.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from collections import OrderedDict
from typing import Any

import redis

from toolq.forks import fresh_in_children
from toolq.keys import Keys
from toolq.models import FINAL_STATUSES, EventType
from toolq.redis_wire import packed
from toolq.results.connection import as_text
from toolq.settings import LONGEST_BLOCK_SECONDS

WAKE_TTL_SECONDS = 60
"""Lifetime of a reader's wake stream after its last wake-up."""
IDLE_SECONDS = 30.0
"""How long an idle reader thread (nobody waiting) stays before it exits."""
BLOCK_MS = int(LONGEST_BLOCK_SECONDS * 1000)
"""Longest single ``XREAD BLOCK`` of the reader (a second or more below the socket timeout,
``redis_socket_timeout``: a Redis that hangs ends the read with a ``TimeoutError``, which is
retried as a lost connection, and a read Redis ends on time never does)."""
BATCH = 1000
PAUSE_PER_STREAM_SECONDS = 5e-6
"""After a read that returned events, the reader waits this long per followed run (at most
``COALESCE_SECONDS``), so that with many runs each read gathers many runs' events: a read
costs Redis about 0.75 µs per stream it names, and the client more to build and parse. The
API's ``EventHub`` does the same."""
PAUSE_PER_CALL_SECONDS = 25e-6
"""And this long per call still awaited through the inbox after the read: with many
conversations waiting (32 conversations await ~50 calls: ~1.2 ms), their final events come
in fewer reads, each of which costs the client a send, a parse and its lock; a conversation
alone, whose wait the read ended, awaits nothing and is not held back."""
COALESCE_PENDING = 32
COALESCE_SECONDS = 0.005
"""While one waiter has at least this many calls pending, the reader reads at most every 5 ms
(a big batch's events then arrive in few reads instead of one read per event)."""

INBOX_KEEP_SECONDS = 3600
"""How long an inbox keeps its entries (``lib/emit.lua`` trims older ones and lets an idle
inbox expire); calls dispatched more than half of it ago are waited on through their run's
stream (the margin covers the clocks of client and Redis)."""
TRIM_EVERY_SECONDS = 1.0
"""How often at most the reader trims its inbox of the entries it has read (``XTRIM MINID``
to its cursor): every entry read is handed to its waiter or kept in ``_orphans`` (a waiter
whose entry was dropped from there reads its run's stream), so the inbox holds about a
second of final events instead of ``INBOX_KEEP_SECONDS`` of them; the keep is then only the
bound for an inbox whose reader is gone."""
ORPHANS = 20000
"""Inbox entries kept for waiters not registered yet (a call that ended before its wait)."""

FINAL_VALUES = frozenset(s.value for s in FINAL_STATUSES)
_NOT_FINAL = frozenset(t.value for t in EventType if not t.is_final)
"""Events the reader skips without decoding their data (most of a busy run's events)."""


def _id_key(value: str) -> tuple[int, int]:
    """A stream id as a sortable pair (``<ms>`` alone counts as ``<ms>-0``)."""
    ms, _, seq = value.partition("-")
    return int(ms), int(seq or 0)


def _field(fields: dict[Any, Any], name: str) -> Any:
    return fields.get(name.encode(), fields.get(name))


def _pairs(flat: Any) -> dict[Any, Any]:
    """A stream entry's fields as a dict (RESP sends them as one flat list)."""
    if isinstance(flat, dict):
        return flat
    items = iter(flat)
    return dict(zip(items, items, strict=True))


def _xread(conn: Any, streams: dict[str, str]) -> list[tuple[Any, Any]]:
    """``XREAD COUNT BATCH BLOCK BLOCK_MS`` of ``streams`` on the reader's ``conn``, as sent.

    Packed (``redis_wire.packed``), sent and read on the connection itself, retried with the
    client's backoff as the client's commands are: redis-py's command path (its pool, retry
    wrapper, hooks and reply callbacks, which build a dict per entry) costs more CPU than the
    read, and the reader reads about once per dispatch. Each stream's entries come as
    ``[id, [field, value, ...]]``; a read that timed out has none.
    """
    command = ("XREAD", "COUNT", BATCH, "BLOCK", BLOCK_MS, "STREAMS", *streams, *streams.values())
    buffer = packed(conn, [command])

    def attempt() -> Any:
        conn.send_packed_command(buffer)
        return conn.read_response()

    reply = conn.retry.call_with_retry(attempt, lambda _error: conn.disconnect())
    if isinstance(reply, dict):  # RESP3
        return list(reply.items())
    return [(stream, entries) for stream, entries in reply or []]


class Pace:
    """How many waits are on now, and how long a wait typically lasts.

    What a client's ``CreateCommit`` reads to decide whether a dispatch waits for the
    dispatches of other conversations to share its round trip (``toolq.dispatch.commit``):
    conversations waiting now will dispatch their next turn soon.
    """

    LONGEST_SECONDS = 1.0
    """A wait counts at most this long in ``typical``: a call parked for a human for hours
    would otherwise stand for every wait of the process."""
    WEIGHT = 0.1
    """Weight of the newest wait in ``typical`` (an exponential moving average)."""

    def __init__(self) -> None:
        self.typical = 0.0
        """Seconds a wait lasted, recently, on average (0 before the first ended)."""
        self.after_fork()
        fresh_in_children(self)

    def after_fork(self) -> None:
        """No wait on (at start, and in a forked child: the parent's waits are not its own)."""
        self._lock = threading.Lock()
        self._waiting = 0

    @property
    def waiting(self) -> int:
        """Waits on now, in this process."""
        return self._waiting

    def begin(self) -> float:
        """A wait starts: when (``time.monotonic()``)."""
        with self._lock:
            self._waiting += 1
        return time.monotonic()

    def end(self, began: float, *, ended: bool) -> None:
        """The wait that ``began`` is over: ``ended`` (its calls final), or given up."""
        took = min(time.monotonic() - began, self.LONGEST_SECONDS)
        with self._lock:
            self._waiting = max(0, self._waiting - 1)  # a wait of the parent's: not counted
            if ended:
                self.typical += self.WEIGHT * (took - self.typical)


class Waiter:
    """One thread's wait for some calls of one run to turn final."""

    __slots__ = (
        "_began",
        "_gate",
        "_pace",
        "error",
        "finished",
        "inbox",
        "pending",
        "run_id",
        "seen",
    )

    def __init__(self, run_id: str, pending: set[str], *, inbox: bool = False) -> None:
        self._pace: Pace | None = None
        """Told when the wait ends (``_begin``: ``SharedWaits.pace``)."""
        self._began = 0.0
        self.run_id = run_id
        self.pending = pending
        self.inbox = inbox
        """Woken through the reader's inbox (``join_inbox``), not its run's stream."""
        self.seen: dict[str, dict[str, Any]] = {}
        """The data of the final events read, by call id."""
        self.finished = False
        """Every call is final (or the reader failed): ``block`` returns at once."""
        self._gate = threading.Lock()
        """Held until the wait is over: releasing a lock is the cheapest wake-up there is
        (a ``threading.Event`` takes a condition, its lock and a notify per wake-up)."""
        self._gate.acquire()
        self.error: BaseException | None = None
        """Set when the reader failed (a Redis error): the wait raises it."""

    def _finish(self) -> None:
        """Wake the waiting thread (once; the reader's lock is held, or nobody else knows it)."""
        if not self.finished:
            self.finished = True
            self._gate.release()
            self._end(ended=True)

    def _begin(self, pace: Pace) -> None:
        """The wait counts in ``pace`` from now until ``_end``.

        Called with the reader's lock held, so the reader cannot have finished it yet.
        """
        self._pace, self._began = pace, pace.begin()

    def _end(self, *, ended: bool) -> None:
        """Tell the pace, once, that the wait is over (``ended``) or given up."""
        pace, self._pace = self._pace, None
        if pace is not None:
            pace.end(self._began, ended=ended)

    def block(self, timeout: float | None) -> bool:
        """Sleep until ``_finish`` (``True``) or ``timeout`` runs out (``False``)."""
        return self.finished or self._gate.acquire(
            timeout=-1 if timeout is None else max(timeout, 0)
        )


class _Run:
    __slots__ = ("cursor", "waiters")

    def __init__(self, cursor: str) -> None:
        self.cursor = cursor
        self.waiters: set[Waiter] = set()


class SharedWaits:
    """The waits of one process on one Redis: one reader thread and connection for all."""

    def __init__(self, client: redis.Redis, keys: Keys) -> None:
        self.redis = client
        self.keys = keys
        self.pace = Pace()
        """The waits of this process's threads: how many now, and how long they last (the
        same object for the client's life; it starts afresh in a forked child itself)."""
        self.after_fork()
        fresh_in_children(self)

    def after_fork(self) -> None:
        """A new reader: at start, and in a forked child.

        The reader thread, its waiters and its lock (perhaps held at the fork) stayed in the
        parent.
        """
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        reader_id = uuid.uuid4().hex
        self.wake_key = self.keys.wait_wake(reader_id)
        self._wake_cursor = "0-0"
        self.inbox = self.keys.wait_inbox(reader_id)
        """The stream a call's record names (``notify``): its final event reaches this reader."""
        self._inbox_cursor = "0-0"
        self._trimmed_at = 0.0
        self._trimmed_to = "0-0"
        """When the reader last trimmed its inbox (``TRIM_EVERY_SECONDS``), monotonic."""
        self._calls: dict[str, list[Waiter]] = {}
        """Inbox waiters by the call ids they wait on."""
        self._orphans: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._dropped_ms = -1
        """The newest inbox entry's time (ms) dropped from ``_orphans``."""
        self.inbox_used = False
        """Whether a wait went through the inbox: a client names it in calls only after one."""
        self._runs: dict[str, _Run] = {}
        self._by_stream: dict[str, str] = {}
        self._thread: threading.Thread | None = None
        self._reading = False
        self._woken = False
        self._closed = False

    # -- waiters -----------------------------------------------------------------------------

    def join(self, run_id: str, pending: set[str], last: str) -> Waiter:
        """Register a wait for ``pending`` calls of ``run_id``, whose states were read at ``last``.

        Events after ``last`` reach the waiter; the caller then blocks in ``wait``.
        """
        waiter = Waiter(run_id, set(pending))
        if not waiter.pending:
            waiter._finish()
            return waiter
        stream = self.keys.run_stream(run_id)
        backlog_to: str | None = None
        with self._lock:
            self._closed = False  # a closed client used again reconnects, as redis-py does
            run = self._runs.get(run_id)
            wake = False
            if run is None:
                run = self._runs[run_id] = _Run(last)
                self._by_stream[stream] = run_id
                wake = self._reading and not self._woken
                self._woken = self._woken or wake
            elif _id_key(last) < _id_key(run.cursor):
                backlog_to = run.cursor
            run.waiters.add(waiter)
            self._start_reader()
            waiter._begin(self.pace)
        try:
            if wake:
                pipe = self.redis.pipeline(transaction=False)
                pipe.xadd(self.wake_key, {"w": "1"}, maxlen=1, approximate=False)
                pipe.expire(self.wake_key, WAKE_TTL_SECONDS)
                pipe.execute()
            if backlog_to is not None:
                entries: Any = self.redis.xrange(stream, min=f"({last}", max=backlog_to)
                with self._lock:
                    if waiter in run.waiters:
                        self._apply(run, [waiter], entries)
        except BaseException:
            self.leave(waiter)
            raise
        return waiter

    def join_inbox(self, run_id: str, pending: set[str], after: str, inbox: str | None) -> Waiter:
        """Register a wait for ``pending`` calls created (at ``after``) to notify ``inbox``.

        ``inbox`` is what their records name: when it is not this reader's (another process
        made the calls, or this one forked since), when the calls are too old for the inbox
        to keep their entries, or the reader may have dropped one of them, the wait goes
        through the run's stream instead (``join``).
        """
        with self._lock:
            self.inbox_used = True
            after_ms = _id_key(after)[0]
            recent = after_ms > (time.time() - INBOX_KEEP_SECONDS / 2) * 1000
            usable = inbox == self.inbox and recent and after_ms > self._dropped_ms
            if not pending:
                waiter = Waiter(run_id, set())
                waiter._finish()
                return waiter
            if usable:
                self._closed = False
                waiter = Waiter(run_id, set(pending), inbox=True)
                waiter._begin(self.pace)
                for call_id in pending:
                    data = self._orphans.pop(call_id, None)
                    if data is not None:
                        self._deliver(call_id, data, [waiter])
                for call_id in waiter.pending:
                    self._calls.setdefault(call_id, []).append(waiter)
                if waiter.pending:
                    self._start_reader()
                else:
                    waiter._finish()
                return waiter
        return self.join(run_id, pending, after)

    def wait(self, waiter: Waiter, timeout: float | None) -> bool:
        """Block until ``waiter`` is done (``True``) or ``timeout`` runs out (``False``, left).

        Raises the reader's error when it failed meanwhile.
        """
        try:
            done = waiter.block(timeout)
        except BaseException:  # interrupted: the wait is given up, not left registered
            self.leave(waiter)
            raise
        if not done:
            with self._lock:
                if not waiter.finished:
                    self._give_up(waiter)
                    return False
        if waiter.error is not None:
            raise waiter.error
        return True

    def leave(self, waiter: Waiter) -> None:
        """Stop waiting (a wait given up)."""
        with self._lock:
            self._give_up(waiter)

    def _give_up(self, waiter: Waiter) -> None:
        """``waiter`` out of the reader's reach and of the pace's count (the lock is held)."""
        self._drop(waiter)
        waiter._end(ended=False)

    def _drop(self, waiter: Waiter) -> None:
        if waiter.inbox:
            for call_id in waiter.pending:
                waiters = self._calls.get(call_id)
                if waiters is not None and waiter in waiters:
                    waiters.remove(waiter)
                    if not waiters:
                        del self._calls[call_id]
            return
        run = self._runs.get(waiter.run_id)
        if run is None:
            return
        run.waiters.discard(waiter)
        if not run.waiters:
            del self._runs[waiter.run_id]
            self._by_stream.pop(self.keys.run_stream(waiter.run_id), None)

    @property
    def waiting(self) -> int:
        """Waiters registered now."""
        with self._lock:
            inbox = {id(w) for ws in self._calls.values() for w in ws}
            return sum(len(r.waiters) for r in self._runs.values()) + len(inbox)

    # -- the reader --------------------------------------------------------------------------

    def _start_reader(self) -> None:
        """Start the reader thread, or wake an idle one (the lock is held)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="toolq-waits", daemon=True)
            self._thread.start()
        else:
            self._idle.notify()

    def _loop(self) -> None:
        # One connection of the client's pool, kept for the reader's life; commands on it
        # retry as the client's do.
        reader = redis.Redis(
            connection_pool=self.redis.connection_pool, single_connection_client=True
        )
        try:
            while self._read_once(reader):
                pass
        finally:
            reader.close()

    def _read_once(self, reader: redis.Redis) -> bool:
        """One ``XREAD`` over every waited run; ``False`` when the reader should exit."""
        with self._lock:
            while not self._runs and not self._calls:
                if self._closed or (
                    not self._idle.wait(IDLE_SECONDS) and not self._runs and not self._calls
                ):
                    self._thread = None
                    return False
            if self._closed:
                self._thread = None
                return False
            streams = {self.keys.run_stream(r): run.cursor for r, run in self._runs.items()}
            streams[self.wake_key] = self._wake_cursor
            streams[self.inbox] = self._inbox_cursor
            coalesce = any(
                len(w.pending) >= COALESCE_PENDING for r in self._runs.values() for w in r.waiters
            )
            self._reading = True
            self._woken = False
        try:
            reply = _xread(reader.connection, streams)
        except Exception as exc:
            self._fail(exc)
            return True
        got = 0
        with self._lock:
            self._reading = False
            for raw_stream, raw_entries in reply:
                stream = as_text(raw_stream)
                if not raw_entries:
                    continue
                entries = [(entry_id, _pairs(fields)) for entry_id, fields in raw_entries]
                if stream == self.wake_key:
                    self._wake_cursor = as_text(entries[-1][0])
                    continue
                if stream == self.inbox:
                    got += len(entries)
                    self._inbox_cursor = as_text(entries[-1][0])
                    self._apply_inbox(entries)
                    continue
                run_id = self._by_stream.get(stream)
                run = self._runs.get(run_id) if run_id is not None else None
                if run is None or run.cursor != streams.get(stream):
                    continue  # left, or left and joined again from another cursor
                got += len(entries)
                run.cursor = as_text(entries[-1][0])
                self._apply(run, list(run.waiters), entries)
            awaited = len(self._calls)
        self._trim_inbox(reader)
        if coalesce and got < BATCH:
            time.sleep(COALESCE_SECONDS)
        elif got:
            pause = len(streams) * PAUSE_PER_STREAM_SECONDS + awaited * PAUSE_PER_CALL_SECONDS
            time.sleep(min(COALESCE_SECONDS, pause))
        return True

    def _trim_inbox(self, reader: redis.Redis) -> None:
        """Drop the inbox entries read (all before the cursor), once a second at most."""
        now = time.monotonic()
        cursor = self._inbox_cursor
        if now - self._trimmed_at < TRIM_EVERY_SECONDS or cursor == self._trimmed_to:
            return
        self._trimmed_at, self._trimmed_to = now, cursor
        # On an error the next trim, or the inbox's own keep (lib/emit.lua), drops them.
        with contextlib.suppress(redis.RedisError):
            reader.xtrim(self.inbox, minid=cursor, approximate=False)

    def _apply(self, run: _Run, waiters: list[Waiter], entries: Any) -> None:
        """Hand ``entries`` (of ``run``'s stream) to ``waiters`` (the lock is held)."""
        for _, fields in entries:
            if as_text(_field(fields, "type") or "") in _NOT_FINAL:
                continue  # most of a busy run's events: skip decoding them
            call_id = as_text(_field(fields, "call_id") or "")
            data: dict[str, Any] | None = None
            for waiter in waiters:
                if call_id not in waiter.pending:
                    continue
                if data is None:
                    data = json.loads(_field(fields, "data") or "{}")
                if data.get("status") not in FINAL_VALUES:
                    break
                waiter.pending.discard(call_id)
                waiter.seen[call_id] = data
                if not waiter.pending:
                    self._drop(waiter)
                    waiter._finish()

    def _apply_inbox(self, entries: Any) -> None:
        """Hand the inbox's ``entries`` to their waiters, or keep them for later (lock held)."""
        for entry_id, fields in entries:
            call_id = as_text(_field(fields, "call_id") or "")
            data = json.loads(_field(fields, "data") or "{}")
            if data.get("status") not in FINAL_VALUES:
                continue
            waiters = self._calls.pop(call_id, None)
            if waiters:
                self._deliver(call_id, data, waiters)
                continue
            self._orphans[call_id] = data
            self._orphans.move_to_end(call_id)
            if len(self._orphans) > ORPHANS:
                self._orphans.popitem(last=False)
                self._dropped_ms = max(self._dropped_ms, _id_key(as_text(entry_id))[0])

    def _deliver(self, call_id: str, data: dict[str, Any], waiters: list[Waiter]) -> None:
        """``call_id``'s final event ``data`` to inbox ``waiters`` (the lock is held)."""
        for waiter in waiters:
            waiter.pending.discard(call_id)
            waiter.seen[call_id] = data
            if not waiter.pending:
                waiter._finish()

    def _fail(self, exc: BaseException) -> None:
        """The read failed after the client's retries: every current waiter raises it."""
        with self._lock:
            self._reading = False
            waiters = [w for run in self._runs.values() for w in run.waiters]
            waiters.extend({id(w): w for ws in self._calls.values() for w in ws}.values())
            self._runs.clear()
            self._by_stream.clear()
            self._calls.clear()
        for waiter in waiters:
            waiter.error = exc
            waiter._end(ended=False)  # no measure of how long a wait lasts
            waiter._finish()

    def close(self, timeout: float = 3.0) -> None:
        """Stop the reader thread (waking it) and let it return its connection."""
        with self._lock:
            thread = self._thread
            self._closed = True
            reading = self._reading
            self._idle.notify()
        if thread is None:
            return
        if reading:
            try:
                self.redis.xadd(self.wake_key, {"w": "1"}, maxlen=1, approximate=False)
                self.redis.expire(self.wake_key, WAKE_TTL_SECONDS)
            except redis.RedisError:
                pass
        thread.join(timeout)
