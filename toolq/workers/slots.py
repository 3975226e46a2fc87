"""How a worker process's execution slots take the calls of a batch message.

A Celery pool slot (a prefork process, a thread of the threads pool, the solo worker) runs
one synchronous call at a time: ``--concurrency`` bounds the synchronous calls a worker
runs at once, as it bounds Celery tasks. ``async def`` calls run on the process's event
loop, at most ``AsyncSlots`` of them at once (``TOOLQ_ASYNC_CONCURRENCY``, shared out
between a prefork worker's processes).

A batch message's calls wait in its ``Pending`` until its slot can start them. A slot
whose current call has run ``GIVE_BACK_AFTER`` seconds, or that has held the message
``HOLD_AT_MOST``, gives the calls it has not started back (``Spiller``): they go out again
in one new message, which any free slot of the fleet takes, so no slot idles for long
while a call waits behind a busy one. While other slots of the same worker run no message
(``Siblings``: a prefork worker's processes, a threads worker's threads), a share of the
waiting calls goes back already once the current call has run ``GIVE_BACK_SOON``, a
message for each idle slot, if the queue holds no message (behind others the calls would
wait longer than on their slot), so a turn's calls of a few milliseconds or more run side
by side. A message of shorter calls stays with its slot, its calls one after the other,
each with two round trips and no new message. A slot takes its message for done only once
no give-back of its calls is in flight: one that fails hands them back to it.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
import multiprocessing
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from celery.utils.log import current_process_index

from toolq.models import RiskLevel

log = logging.getLogger("toolq.worker")

GIVE_BACK_AFTER = 0.05
"""Seconds a slot's current call may run before the message's calls waiting behind it go back."""
GIVE_BACK_SOON = 0.005
"""The same, while other slots of the worker run no message (``Siblings``): a share of the
calls waiting goes back for them; quicker calls stay."""
HOLD_AT_MOST = 0.25
"""Seconds a slot keeps a batch message's calls it has not started, however short its calls."""
DEFAULT_ASYNC_CONCURRENCY = 100


@dataclass(frozen=True)
class Route:
    """Where a batch message came from: what a message giving back its calls needs."""

    risk: RiskLevel
    timeout: float | None
    """The calls' own time limit (the message's hard limit less its grace), if any."""


Call = tuple[str, str]
"""``(call_id, run_id)`` as a batch message carries it."""


class Pending:
    """A batch message's calls not started yet, shared by its slot and the ``Spiller``."""

    def __init__(
        self, calls: Sequence[Call], route: Route | None, kinds: dict[str, bool] | None = None
    ) -> None:
        self.route = route
        self.kinds = kinds or {}
        """Which calls are ``async def`` ones (the message given back says so too)."""
        self._calls: deque[Call] = deque(calls)
        self._lock = threading.Lock()
        self._giving = 0
        self._given = threading.Condition(self._lock)
        self.closed = False
        """Its slot is done with the message: nothing is given back any more."""
        self.taken_at = time.monotonic()
        self.busy_since = self.taken_at
        """When the slot started its current call (or began waiting for the loop's slots)."""

    def busy(self) -> None:
        """The slot starts its next call: the calls behind it wait from now."""
        self.busy_since = time.monotonic()

    def give_back_at(self, soon: bool = False) -> float:
        """When its calls not started go back (``time.monotonic()``), as things stand.

        ``soon``: for idle slots of the worker (``GIVE_BACK_SOON``).
        """
        after = GIVE_BACK_SOON if soon else GIVE_BACK_AFTER
        return min(self.busy_since + after, self.taken_at + HOLD_AT_MOST)

    def __len__(self) -> int:
        return len(self._calls)

    def count(self, wanted: Callable[[Call], bool]) -> int:
        """How many pending calls ``wanted`` accepts."""
        with self._lock:
            return sum(1 for call in self._calls if wanted(call))

    def take(self, wanted: Callable[[Call], bool]) -> Call | None:
        """The first call ``wanted`` accepts, taken out; ``None`` if there is none."""
        with self._lock:
            for call in self._calls:
                if wanted(call):
                    self._calls.remove(call)
                    return call
        return None

    def take_many(self, wanted: Callable[[Call], bool], most: int) -> list[Call]:
        """Up to ``most`` calls ``wanted`` accepts, in order, taken out."""
        taken: list[Call] = []
        with self._lock:
            for call in list(self._calls):
                if len(taken) >= most:
                    break
                if wanted(call):
                    self._calls.remove(call)
                    taken.append(call)
        return taken

    def take_to_give(self, most: int | None = None) -> list[Call]:
        """Calls taken out to be given back: all, or the last ``most`` (none once closed).

        Until ``settle``, the slot does not take the message for done (``wait_given``): a
        give-back that fails hands its calls back to a slot still there to run them, and
        the message is acknowledged only after the new one is pushed.
        """
        with self._lock:
            if self.closed:
                return []
            count = len(self._calls) if most is None else max(0, min(most, len(self._calls)))
            taken = [self._calls.pop() for _ in range(count)][::-1]
            if taken:
                self._giving += 1
            return taken

    def settle(self, back: Sequence[Call], last: bool = False) -> None:
        """A give-back is over; ``back`` (the calls it did not send) return to the slot.

        They go where they were taken from: in front, or ``last``.
        """
        with self._lock:
            if last:
                self._calls.extend(back)
            else:
                self._calls.extendleft(reversed(back))
            self._giving -= 1
            self._given.notify_all()

    def giving(self) -> bool:
        """Whether a give-back of its calls is in flight."""
        with self._lock:
            return self._giving > 0

    def wait_given(self) -> bool:
        """Wait for the give-backs in flight to settle; whether calls came back to run."""
        with self._lock:
            while self._giving:
                self._given.wait()
            return bool(self._calls)

    def close(self) -> None:
        """The slot is done: what is left (nothing, normally) stays with it."""
        with self._lock:
            self.closed = True


class AsyncSlots:
    """How many ``async def`` calls the process may still start on its event loop."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._free = size
        self._changed = threading.Condition()

    def try_acquire(self, want: int = 1) -> int:
        """Take up to ``want`` slots without waiting; how many were taken."""
        with self._changed:
            got = min(want, self._free)
            self._free -= got
            return got

    def free(self) -> int:
        """How many are free now (another thread may take them next)."""
        with self._changed:
            return self._free

    def acquire(self) -> None:
        """Take one slot, waiting for one to free."""
        with self._changed:
            while self._free <= 0:
                self._changed.wait()
            self._free -= 1

    def release(self, n: int = 1) -> None:
        """Give ``n`` slots back."""
        if n <= 0:
            return
        with self._changed:
            self._free += n
            self._changed.notify_all()

    def wait(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for a slot to free (none may be left by then)."""
        with self._changed:
            if self._free <= 0:
                self._changed.wait(timeout)


class Siblings:
    """The other slots of a worker: how many run no message now (``idle``).

    A slot that runs a message holds one while it does (``enter``, ``leave``). The
    ``Spiller`` hands a share of a busy slot's waiting calls to idle ones soon.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self._running = 0
        self._lock = threading.Lock()

    def enter(self) -> None:
        """A slot of the worker starts running a message."""
        with self._lock:
            self._running += 1

    def leave(self) -> None:
        """A slot of the worker is done with its message."""
        with self._lock:
            self._running -= 1

    def idle(self) -> int:
        """How many slots of the worker run no message now."""
        return max(0, self.size - self._running)


class ProcessSiblings(Siblings):
    """The processes of a prefork worker, each one slot: flags in shared memory.

    Made in the worker's main process before its pool forks (``toolq.workers.app``); each
    process sets its flag, found by its pool index, while it runs a message. A process that
    replaces a dead one has its index and clears the flag the dead one left set.
    """

    def __init__(self, size: int) -> None:
        super().__init__(size)
        self._flags = multiprocessing.RawArray("b", size)

    def enter(self) -> None:
        """Set the calling process's flag: it runs a message."""
        self._mark(1)

    def leave(self) -> None:
        """Clear the calling process's flag: done with its message (or replacing a dead one)."""
        self._mark(0)

    def _mark(self, flag: int) -> None:
        index = current_process_index(base=0)
        if index is not None and 0 <= index < self.size:
            self._flags[index] = flag

    def idle(self) -> int:
        """How many processes of the worker run no message now."""
        return self.size - int(sum(self._flags))


class Spiller(threading.Thread):
    """Gives back the calls a busy slot has not started (``Pending.give_back_at``)."""

    def __init__(
        self,
        give_back: Callable[[Pending, int | None, int], None],
        idle_siblings: Callable[[], int] | None = None,
    ) -> None:
        """Give back what busy slots hold, with ``give_back(pending, most, parts)``.

        ``give_back`` sends ``most`` of the calls (``None``: all) out again, in ``parts``
        messages. ``idle_siblings``: how many other slots of the worker run no message now
        (``Siblings.idle``): while some do not, a share of the waiting calls goes back after
        ``GIVE_BACK_SOON`` already, a message for each of them.
        """
        super().__init__(name="toolq-give-back", daemon=True)
        self.give_back = give_back
        self.idle_siblings = idle_siblings
        self._due: list[tuple[float, int, Pending]] = []
        self._seq = itertools.count()
        self._changed = threading.Condition()
        self._stopping = False

    def watch(self, pending: Pending) -> None:
        """Give back what ``pending`` still holds when its slot has been busy too long."""
        with self._changed:
            first = pending.give_back_at(soon=self.idle_siblings is not None)
            # The thread sleeps until the earliest look: wake it only to look sooner.
            sooner = not self._due or first < self._due[0][0]
            heapq.heappush(self._due, (first, next(self._seq), pending))
            if sooner:
                self._changed.notify()

    def stop(self) -> None:
        """End the thread (in-process test workers close their runtimes)."""
        with self._changed:
            self._stopping = True
            self._changed.notify()

    def run(self) -> None:
        """Wait for each message's deadline; give back what its slot has not started."""
        while True:
            with self._changed:
                while not self._stopping:
                    if not self._due:
                        self._changed.wait()
                        continue
                    wait = self._due[0][0] - time.monotonic()
                    if wait <= 0:
                        break
                    self._changed.wait(wait)
                if self._stopping:
                    return
                _, _, pending = heapq.heappop(self._due)
                if pending.closed or not len(pending):
                    continue
                now = time.monotonic()
                most: int | None = None
                parts = 1
                idle = self.idle_siblings() if self.idle_siblings is not None else 0
                if pending.give_back_at() > now:  # not due for every slot of the fleet yet
                    again = pending.give_back_at(soon=idle > 0)
                    if again > now:  # its slot started another call meanwhile
                        heapq.heappush(self._due, (again, next(self._seq), pending))
                        continue
                    # the idle slots' share, a message each, and a look again for the rest
                    most = math.ceil(len(pending) * idle / (idle + 1))
                    parts = min(idle, most)
                    heapq.heappush(self._due, (pending.give_back_at(), next(self._seq), pending))
            try:
                self.give_back(pending, most, parts)
            except Exception:  # the slot runs them after all
                log.exception("giving back calls failed")
