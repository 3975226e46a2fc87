"""``GroupCommitter``: several threads' writes to Redis, gathered into round trips.

The first thread to arrive sends at once, its own request and whatever else is queued
(nothing, when it is alone); requests that arrive while a round trip is in flight wait for
it to come back and go together in the next one, as a database's group commit does. Each
thread returns once its own request is answered. A committer may have its sender wait a
little for company first (``_company``), as a database's commit delay does, when more
requests are sure to come soon; by default none waits for a timer or for company, only
for the round trip already in flight.

A round trip's error is every request's when Redis refused it as a whole (full, read-only,
disk, replicas) or did not answer; a script's error (a refusal of one request's keys, a bug)
is not the others': the requests are then sent again, each alone, and only the one at fault
fails. Every write sent here is safe to repeat.

The worker's ``START``s and ``FINISH``es (``toolq.workers.commit``) and a client's
``CREATE``s (``toolq.dispatch.commit``) use it, each with its own ``_round_trip``.
"""

from __future__ import annotations

import threading
from typing import Generic, TypeVar

import redis

from toolq.forks import fresh_in_children
from toolq.redis_failures import refusal


class Request:
    """One thread's writes; ``_send`` answers it (its replies, or ``error``)."""

    error: BaseException | None = None
    done: bool = False
    """Answered by the round trip that carried it."""
    gate: threading.Lock | None = None
    """Held while the request waits behind a round trip in flight; released to wake its
    thread: answered (``done``), or the next to send."""


R = TypeVar("R", bound=Request)


class GroupCommitter(Generic[R]):
    """Sends requests of several threads in one round trip (``_send``) at a time."""

    def __init__(self) -> None:
        self.after_fork()
        fresh_in_children(self)
        self.round_trips = 0
        """Round trips sent (each carrying one or more threads' requests)."""
        self.requests = 0
        """Threads' requests answered."""
        self.lingered = 0
        """Round trips whose sender waited for company (``_company``) first."""

    def after_fork(self) -> None:
        """Nothing queued or in flight: at start, and in a child forked meanwhile.

        The parent's threads, their requests and its round trip in flight are not the child's.
        """
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)
        """Notified when a request joins a sender waiting for company that has ``_enough``."""
        self._lingering = False
        self._queue: list[R] = []
        self._sending = False
        self._next: R | None = None
        """The request whose thread was woken to send next."""

    def _join(self, request: R) -> R:
        """``request``, answered: in this thread's round trip or in another's.

        Sent at once when no round trip is in flight, else with the requests queued
        behind the one in flight. A sender wakes only the threads it answered, and the
        thread of the first request queued behind them, which sends next: no thread wakes
        to find its request still waiting.
        """
        with self._lock:
            self._queue.append(request)
            if self._sending:
                request.gate = threading.Lock()
                request.gate.acquire()
                if self._lingering and self._enough(self._queue):
                    self._arrived.notify()
            else:
                self._sending = True
        if request.gate is not None:
            try:
                request.gate.acquire()  # woken answered, or to send the requests queued
            except BaseException:  # interrupted: never strand the requests behind it
                self._leave(request)
                raise
            if request.done:
                return request
        linger = self._company()
        with self._lock:
            if linger > 0 and not self._enough(self._queue):
                self._linger(request, linger)
            batch, self._queue = self._queue, []
            self.requests += len(batch)
        try:
            self._send(batch)
        finally:
            with self._lock:
                for sent in batch:
                    sent.done = True
                following = self._next = self._queue[0] if self._queue else None
                self._sending = following is not None
            for sent in batch:
                if sent is not request and sent.gate is not None:
                    sent.gate.release()
            if following is not None and following.gate is not None:
                following.gate.release()
        return request

    def _linger(self, request: R, seconds: float) -> None:
        """The sender of ``request`` waits for company up to ``seconds`` (the lock is held).

        Interrupted, it takes its request back and passes on its turn to send, as a
        request interrupted in the queue does: the requests behind it are never stranded.
        """
        before = len(self._queue)
        self._lingering = True
        self.lingered += 1
        try:
            self._arrived.wait(seconds)
        except BaseException:
            self._next = request
            following = self._withdraw(request)
            if following is not None and following.gate is not None:
                following.gate.release()
            raise
        finally:
            self._lingering = False
        self._gathered(len(self._queue) - before)

    def _leave(self, request: R) -> None:
        """Take back a request whose thread stopped waiting; pass on its turn to send."""
        with self._lock:
            following = self._withdraw(request)
        if following is not None and following.gate is not None:
            following.gate.release()

    def _withdraw(self, request: R) -> R | None:
        """``request`` out of the queue; the next to send if it had the turn (lock held)."""
        if request.done or request not in self._queue:
            return None
        self._queue.remove(request)
        if self._next is not request:
            return None
        following = self._next = self._queue[0] if self._queue else None
        self._sending = following is not None
        return following

    def _company(self) -> float:
        """Seconds the next sender waits for more requests before it sends (0: none).

        Asked once per round trip, before the sender takes the queue; it stops waiting as
        soon as the queue has ``_enough``.
        """
        return 0.0

    def _enough(self, queued: list[R]) -> bool:
        """Whether ``queued`` is worth a round trip without waiting for more (lock held)."""
        return True

    def _gathered(self, joined: int) -> None:
        """How many requests joined while the sender waited for company (lock held)."""

    def _send(self, batch: list[R]) -> None:
        """One round trip for ``batch``: each request's replies, or its ``error``."""
        self.round_trips += 1
        try:
            self._round_trip(batch)
        except redis.ResponseError as exc:
            if len(batch) == 1 or refusal(exc) is not None:
                self._fail(batch, exc)
                return
            for request in batch:  # one request's error is not the others': each alone
                self._send([request])
        except BaseException as exc:  # connection lost, replicas missing
            self._fail(batch, exc)

    @staticmethod
    def _fail(batch: list[R], exc: BaseException) -> None:
        for request in batch:
            request.error = exc

    def _round_trip(self, batch: list[R]) -> None:
        """Send ``batch`` in one round trip and fill in each request's replies; raise its error."""
        raise NotImplementedError
