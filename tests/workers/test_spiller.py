"""The ``Spiller`` in one process: when it gives back a busy slot's waiting calls, and how many."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from toolq.models import RiskLevel
from toolq.workers.slots import GIVE_BACK_SOON, Pending, Route, Spiller

ROUTE = Route(RiskLevel.SAFE, None)


class Given:
    """What the spiller gave back: ``(pending, most, parts)``, as they came."""

    def __init__(self) -> None:
        self.calls: list[tuple[Pending, int | None, int]] = []
        self.came = threading.Event()

    def __call__(self, pending: Pending, most: int | None, parts: int) -> None:
        taken = pending.take_all() if most is None else pending.take_last(most)
        self.calls.append((pending, len(taken), parts))
        self.came.set()


@pytest.fixture
def given() -> Iterator[Given]:
    yield Given()


def _spiller(given: Given, idle: list[int] | None = None) -> Spiller:
    spiller = Spiller(given, (lambda: idle[0]) if idle is not None else None)
    spiller.start()
    return spiller


def _pending(n: int) -> Pending:
    return Pending([(f"c{i}", "run") for i in range(n)], ROUTE)


def test_a_new_message_is_looked_at_in_time_behind_a_later_one(given: Given) -> None:
    """The thread sleeps until its earliest look; a message due sooner wakes it."""
    spiller = _spiller(given)
    try:
        later = _pending(3)
        later.taken_at = later.busy_since = time.monotonic() + 30  # due in half a minute
        spiller.watch(later)
        time.sleep(0.05)  # the thread now sleeps until then
        sooner = _pending(3)
        spiller.watch(sooner)
        assert given.came.wait(10), "the sooner message was not given back"
        assert given.calls[0][0] is sooner
    finally:
        spiller.stop()


def test_with_idle_slots_a_share_goes_back_soon_a_message_each(given: Given) -> None:
    """Two idle slots, six calls waiting: four go back after ``GIVE_BACK_SOON``, in two
    messages; the slot keeps two."""
    spiller = _spiller(given, idle=[2])
    try:
        pending = _pending(6)
        spiller.watch(pending)
        assert given.came.wait(10)
        [(_, count, parts)] = given.calls
        assert (count, parts, len(pending)) == (4, 2, 2)
        assert [c for c, _ in pending.take_all()] == ["c0", "c1"]  # the first ones stay
    finally:
        spiller.stop()


def test_without_idle_slots_nothing_goes_back_soon(given: Given) -> None:
    spiller = _spiller(given, idle=[0])
    try:
        pending = _pending(3)
        spiller.watch(pending)
        assert not given.came.wait(GIVE_BACK_SOON * 4)
        assert given.came.wait(10)  # after GIVE_BACK_AFTER: all of them, one message
        assert given.calls[0][1:] == (3, 1)
    finally:
        spiller.stop()
