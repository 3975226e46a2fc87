"""``GroupCommitter``: several threads' writes to Redis, gathered into round trips.

The first thread to arrive sends at once, its own request and whatever else is queued
(nothing, when it is alone); requests that arrive while a round trip is in flight wait for
it to come back and go together in the next one, as a database's group commit does. No
request waits for a timer or for company, only for the round trip already in flight. Each
thread returns once its own request is answered.

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

from toolq.redis_failures import refusal


class Request:
    """One thread's writes; ``_send`` answers it (its replies, or ``error``)."""

    error: BaseException | None = None
    done: bool = False
    """Answered by the round trip that carried it."""


R = TypeVar("R", bound=Request)


class GroupCommitter(Generic[R]):
    """Sends requests of several threads in one round trip (``_send``) at a time."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._queue: list[R] = []
        self._sending = False
        self.round_trips = 0
        """Round trips sent (each carrying one or more threads' requests)."""
        self.requests = 0
        """Threads' requests answered."""

    def _join(self, request: R) -> R:
        """``request``, answered: in this thread's round trip or in another's.

        Sent at once when no round trip is in flight, else with the requests queued
        behind the one in flight.
        """
        with self._changed:
            self._queue.append(request)
            while self._sending and not request.done:
                self._changed.wait()
            if request.done:
                return request
            self._sending = True
            batch, self._queue = self._queue, []
            self.requests += len(batch)
        try:
            self._send(batch)
        finally:
            with self._changed:
                self._sending = False
                for sent in batch:
                    sent.done = True
                self._changed.notify_all()
        return request

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
