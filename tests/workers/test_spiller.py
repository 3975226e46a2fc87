"""The ``Spiller`` in one process: when it gives back a busy slot's waiting calls, and how many."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import redis

from tests.conftest import InProcess
from tests.slots_app import registry
from toolq import CallStatus, Client
from toolq.models import RiskLevel
from toolq.results.store import CallStore
from toolq.settings import Settings
from toolq.workers.slots import GIVE_BACK_SOON, Pending, Route, Siblings, Spiller

ROUTE = Route(RiskLevel.SAFE, None)


class Given:
    """What the spiller gave back: ``(pending, most, parts)``, as they came."""

    def __init__(self) -> None:
        self.calls: list[tuple[Pending, int | None, int]] = []
        self.came = threading.Event()

    def __call__(self, pending: Pending, most: int | None, parts: int) -> None:
        taken = pending.take_to_give(most)
        self.calls.append((pending, len(taken), parts))
        pending.settle([])
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
        assert [c for c, _ in pending.take_to_give()] == ["c0", "c1"]  # the first ones stay
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


def test_a_slot_waits_for_a_give_back_in_flight_and_runs_what_comes_back() -> None:
    """The slot found its message empty while the give-back thread held the calls: it
    waits, and a give-back that failed hands them back for the slot to run."""
    pending = _pending(3)
    assert [c for c, _ in pending.take_to_give(2)] == ["c1", "c2"]
    assert pending.giving()
    came_back: list[bool] = []
    slot = threading.Thread(target=lambda: came_back.append(pending.wait_given()))
    slot.start()
    slot.join(0.2)
    assert slot.is_alive()  # still waiting: the calls may come back
    pending.settle([("c1", "run"), ("c2", "run")], last=True)  # the push failed
    slot.join(5)
    assert came_back == [True] and not pending.giving()
    assert [c for c, _ in pending.take_to_give()] == ["c0", "c1", "c2"]  # order kept


def test_a_give_back_failing_after_the_slot_ran_its_other_calls_leaves_it_the_call(
    settings: Settings, inproc: InProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two calls in one message on a worker with idle slots: the give-back thread takes the
    second while the first runs, and its push fails only after the first has ended. The
    slot waits for it instead of taking the message for done, and runs the call itself
    (it used to stay queued until the sweeper re-sent it, seconds later)."""
    worker = inproc.worker("safe", app="tests.slots_app:registry")
    worker.app.toolq_runtimes.siblings = Siblings(4)  # as a threads worker of 4 has

    def failing(*_: object, **__: object) -> int:  # a Redis error a round trip late
        time.sleep(0.1)
        raise redis.ConnectionError("injected: connection reset")

    monkeypatch.setattr(CallStore, "give_back", failing)
    calls = [{"id": "a", "name": "nap", "arguments": {"seconds": 0.03}},
             {"id": "b", "name": "nap", "arguments": {"seconds": 0.001}}]  # fmt: skip
    with Client(registry, settings) as client:
        batch = client.dispatch(calls)
        worker.drain(timeout=10)
        statuses = [client.result(c).status for c in batch.call_ids]
    assert statuses == [CallStatus.SUCCEEDED, CallStatus.SUCCEEDED]
