"""``NewsWriter``: the progress and retrying events of ``async def`` calls, off the event loop.

A worker process runs its ``async def`` calls on one event loop. Were an async generator's
every yield (a ``call.progress`` event) written from the loop, each would hold up every other
coroutine for a round trip, and for as long as Redis takes to answer: a Redis that hangs or
restarts would stop them all. Their news goes through this writer instead: a thread of the
process that sends what the calls queued, in one round trip for everything queued (in the
order it was queued: a call's events keep their order), while the loop goes on.

A call's final state is written only after its news (``flush`` before its ``FINISH``), so
its stream never shows progress after its end. News is not state: what Redis refuses (full,
read-only) or cannot take within the client's retries (``RETRY_SECONDS``) is dropped and
logged, never the call; so is news queued past ``MAX_QUEUED`` events or ``MAX_QUEUED_BYTES``
of data while the writer cannot keep up (the loop is never made to wait for Redis, and a
tool that streams faster than Redis takes it cannot grow the worker's memory without bound).
A round trip carries at most ``BATCH_MAX`` events and about ``BATCH_BYTES`` of data; the rest
goes in the next.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import redis

from toolq.forks import fresh_in_children
from toolq.models import CallEnvelope, EventType
from toolq.redis_failures import refusal

log = logging.getLogger("toolq.worker")

MAX_QUEUED = 10_000
"""News queued and not yet written past which new news is dropped (logged)."""
MAX_QUEUED_BYTES = 64 * 1024 * 1024
"""Data of the news queued and not yet written past which new news is dropped (logged)."""
BATCH_MAX = 1_000
"""Most events one round trip writes."""
BATCH_BYTES = 4 * 1024 * 1024
"""Data one round trip writes, about: it takes events until it is over this."""


@dataclass(frozen=True)
class News:
    """One non-final event of a running call."""

    envelope: CallEnvelope
    token: str
    etype: EventType
    data: str
    """As JSON, encoded when queued: what the call reported then, whatever it changes after."""


Write = Callable[[Sequence[News]], object]
"""Appends news in one round trip, in order (``CallStore.progress_many``)."""


class NewsWriter:
    """Writes the queued news of a process's calls from a thread of its own, in order."""

    def __init__(self, write: Write) -> None:
        self._write = write
        self._changed = threading.Condition()
        self._queue: deque[tuple[int, News]] = deque()
        self._queued = 0
        """Sequence number of the last news queued."""
        self._bytes = 0
        """Data of the news queued and not taken by the writer yet."""
        self._done = 0
        """Every news numbered up to this one is written (or dropped)."""
        self._last: dict[str, int] = {}
        """The number of each call's last news queued and not yet flushed."""
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._dropped = 0
        """News refused by ``put`` since the last line logged about it."""
        self._dropped_logged = 0.0
        fresh_in_children(self)

    def after_fork(self) -> None:
        """Start afresh in a forked child: nothing of the parent's news is its own.

        Its writer thread stayed in the parent, perhaps holding the condition.
        """
        self._changed = threading.Condition()
        self._queue.clear()
        self._bytes = 0
        self._last.clear()
        self._done = self._queued
        self._thread = None

    def put(self, news: News) -> None:
        """Queue ``news`` for the writer; returns at once."""
        with self._changed:
            if (
                self._stopping
                or self._queued - self._done >= MAX_QUEUED
                or self._bytes + len(news.data) > MAX_QUEUED_BYTES
            ):
                self._refused(news)
                return
            self._queued += 1
            self._bytes += len(news.data)
            self._queue.append((self._queued, news))
            self._last[news.envelope.call_id] = self._queued
            self._running()
            self._changed.notify_all()

    def flush(self, call_ids: Iterable[str]) -> None:
        """Return once the news queued so far of ``call_ids`` is written (or dropped)."""
        with self._changed:
            wanted = max((self._last.pop(c, 0) for c in call_ids), default=0)
            while self._done < wanted and self._thread is not None and self._thread.is_alive():
                self._changed.wait(1.0)

    def stop(self) -> None:
        """Write what is queued, then end the thread."""
        with self._changed:
            self._stopping = True
            self._changed.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(30)

    def _refused(self, news: News) -> None:
        """Count news ``put`` cannot queue, logged at most once a second; lock held."""
        self._dropped += 1
        now = time.monotonic()
        if now - self._dropped_logged < 1.0:
            return
        why = (
            "the worker is stopping"
            if self._stopping
            else f"{MAX_QUEUED} events or {MAX_QUEUED_BYTES} bytes not yet written"
        )
        log.warning(
            "%d event(s) dropped, the last a %s event of call %s: %s",
            self._dropped,
            news.etype.value,
            news.envelope.call_id,
            why,
        )
        self._dropped, self._dropped_logged = 0, now

    def _running(self) -> None:
        """Start the writer thread if this process has none running; lock held."""
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name="toolq-news", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while True:
            with self._changed:
                while not self._queue and not self._stopping:
                    self._changed.wait()
                if not self._queue:
                    return
                batch: list[tuple[int, News]] = []
                size = 0
                while self._queue and len(batch) < BATCH_MAX and size <= BATCH_BYTES:
                    batch.append(self._queue.popleft())
                    size += len(batch[-1][1].data)
                self._bytes -= size
            self._send([news for _, news in batch])
            with self._changed:
                self._done = batch[-1][0]
                if len(self._last) > MAX_QUEUED:  # calls whose slot never flushed them
                    self._last = {c: n for c, n in self._last.items() if n > self._done}
                self._changed.notify_all()

    def _send(self, batch: Sequence[News]) -> None:
        """Write ``batch``, or drop (logged) what Redis cannot take; never raises."""
        try:
            self._write(batch)
            return
        except redis.ResponseError as exc:
            if len(batch) > 1 and refusal(exc) is None:
                # Every event's script ran in the round trip: only the erring ones wrote
                # nothing, and sending the others again would append them twice.
                calls = sorted({news.envelope.call_id for news in batch})
                log.warning(
                    "of %d events sent together (calls %s), one or more not written: %s",
                    len(batch),
                    ", ".join(calls),
                    exc,
                )
                return
            reason: Exception = exc
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            reason = exc
        except Exception as exc:  # a bug: logged with its traceback, the calls go on
            log.exception("%d event(s) not written", len(batch))
            reason = exc
        if len(batch) == 1:
            news = batch[0]
            log.warning(
                "%s event of call %s dropped: %s", news.etype.value, news.envelope.call_id, reason
            )
            return
        calls = sorted({news.envelope.call_id for news in batch})
        log.warning("%d events of calls %s dropped: %s", len(batch), ", ".join(calls), reason)
