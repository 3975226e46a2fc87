"""``CreateCommit``: the CREATEs of a process's concurrent dispatches, in one round trip.

Many conversations in one client process each dispatch a few calls at a time. A dispatch
whose calls are planned while another dispatch's CREATE pipeline is in flight waits for it
to come back, then goes with every other dispatch queued meanwhile in the next pipeline,
as a database's group commit does (``toolq.results.group_commit``; the worker's FINISHes
go the same way).

The dispatch that sends (the first to arrive, or the first queued behind a round trip in
flight) sends at once, unless other conversations of this process are waiting for their
calls' results (their next turns will dispatch soon) and other threads' dispatches arrive
sooner than it would wait (``Company``): it then waits for them up to ``dispatch_linger``
and at most ``Company.SHARE`` of a typical wait, or until ``calls_per_message`` calls are
queued, so its round trip carries several conversations' calls and a worker gets one
message for all of them instead of one per dispatch (each message costs a worker more CPU
than a call). A wait nobody joined stops the waiting for the next few dispatches. A client
dispatching one conversation at a time, or one batch, never waits.

The pipeline's queued calls share messages by the dispatcher's own rules, whichever
dispatch they come from (a batch message carries each call's run), so a worker gets one
message, not one per dispatch. Each dispatch gets the replies of its own calls only; an
error of the shared round trip (Redis down, read-only, full) is raised in every dispatch it
carried, while a script's error (one dispatch's keys refused) is its own dispatch's: the
dispatches are sent again, each alone. Each call's CREATE is claimed under its own
idempotency key, so a dispatch sent again is answered from what was written, never twice.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from toolq.forks import fresh_in_children
from toolq.results.group_commit import GroupCommitter, Request
from toolq.results.store import CallStore, MessageGroup, NewCall

if TYPE_CHECKING:
    from toolq.models import RiskLevel
    from toolq.results.runner import Invocation
    from toolq.results.waits import Pace

Messages = Callable[[list[NewCall]], tuple[list[NewCall], list[MessageGroup]]]
"""``Dispatcher._messages``: the calls with their lone messages set, and the shared ones."""
Created = tuple[list[NewCall], list[tuple[str, str]]]
"""A dispatch's calls as created (lone messages set) and CREATE's reply for each."""


@dataclass
class _Request(Request):
    calls: Sequence[NewCall]
    created: Created = field(default_factory=lambda: ([], []))

    def answer(self) -> Created:
        if self.error is not None:
            raise self.error
        return self.created


class Company:
    """How long a dispatch waits for the dispatches of other conversations of its process.

    Conversations waiting for their calls now (``Pace``) dispatch their next turns soon: a
    dispatch waits for them when other threads' dispatches arrive, on average, sooner than
    it would wait. It waits at most ``most`` seconds (``dispatch_linger``) and at most
    ``share`` of a typical wait, so a turn is never held back by more than that share of
    its own time; a process with nobody else waiting, or whose dispatches come further
    apart, sends at once, and a wait that nobody joined stops the waiting for the next
    ``PAUSE_AFTER_ALONE`` dispatches.
    """

    SHARE = 0.25
    """Most of a typical wait (``Pace.typical``) a dispatch waits for company: what a turn
    may lose at most. Against 0.05 on 32 and 8 conversations: the prefork worker's calls/s
    about 1.25x, its turn p50 and p99 lower; the threads workers, 4, 256 and 1,000 asyncio
    conversations within noise (docs/benchmarks, the company's share)."""
    WEIGHT = 0.2
    """Weight of the newest gap in ``gap`` (an exponential moving average)."""
    PAUSE_AFTER_ALONE = 8
    """Dispatches sent at once after a wait that nobody joined, before waiting again."""

    def __init__(self, pace: Pace | None, most: float, share: float = SHARE) -> None:
        self.pace = pace
        self.most = most
        self.share = share
        self.gap = float("inf")
        """Seconds between two dispatches of different threads of this process, recently,
        on average: a thread's own dispatches, one after the other, are no company for it."""
        self.after_fork()
        fresh_in_children(self)

    def after_fork(self) -> None:
        """No dispatch seen: at start, and in a forked child.

        The parent's threads stayed in the parent, one perhaps holding the lock.
        """
        self._lock = threading.Lock()
        self._last = 0.0
        self._last_thread = 0
        self._paused = 0

    def arrived(self) -> None:
        """A dispatch arrived (on this thread)."""
        now, thread = time.monotonic(), threading.get_ident()
        with self._lock:
            if self._last and thread != self._last_thread:
                gap = min(now - self._last, 1.0)
                self.gap = (
                    gap if self.gap == float("inf") else self.gap + self.WEIGHT * (gap - self.gap)
                )
            self._last, self._last_thread = now, thread

    def gathered(self, joined: int) -> None:
        """A wait for company ended with ``joined`` more dispatches queued.

        None joined: the next ``PAUSE_AFTER_ALONE`` dispatches go at once (whoever waits is
        not coming).
        """
        if joined == 0:
            self._paused = self.PAUSE_AFTER_ALONE

    def linger(self) -> float:
        """Seconds the next round trip waits for more dispatches (0: none)."""
        pace = self.pace
        if pace is None or self.most <= 0 or pace.waiting < 1:
            return 0.0
        if self._paused:
            self._paused -= 1
            return 0.0
        linger = min(self.most, self.share * pace.typical)
        return linger if self.gap < linger else 0.0


class CreateCommit(GroupCommitter[_Request]):
    """Creates the calls of one process's dispatches, several dispatches' per round trip."""

    def __init__(
        self,
        store: CallStore,
        messages: Messages,
        admit: Callable[[RiskLevel], Invocation[Any]] | None = None,
        *,
        company: Company | None = None,
        full: int = 16,
    ) -> None:
        super().__init__()
        self.store = store
        self.messages = messages
        self.admit = admit
        self.company = company
        """When a round trip waits for other conversations' dispatches (none: never)."""
        self.full = full
        """Calls queued (of any risk) that end a wait for company (``calls_per_message``)."""

    def create(self, calls: Sequence[NewCall]) -> Created:
        """``CallStore.create_many`` of one dispatch's calls, in the next round trip.

        Sent at once when no other dispatch's round trip is in flight, else with the
        dispatches queued behind it.
        """
        if not calls:
            return [], []
        if self.company is not None:
            self.company.arrived()
        return self._join(_Request(calls)).answer()

    def _company(self) -> float:
        return self.company.linger() if self.company is not None else 0.0

    def _enough(self, queued: list[_Request]) -> bool:
        return sum(len(request.calls) for request in queued) >= self.full

    def _gathered(self, joined: int) -> None:
        if self.company is not None:
            self.company.gathered(joined)

    def _round_trip(self, batch: list[_Request]) -> None:
        """One pipeline for every call of ``batch``, its replies split back by request."""
        calls, groups = self.messages([c for request in batch for c in request.calls])
        replies = self.store.create_many(calls, groups, admit=self.admit)
        start = 0
        for request in batch:
            end = start + len(request.calls)
            request.created = calls[start:end], replies[start:end]
            start = end
