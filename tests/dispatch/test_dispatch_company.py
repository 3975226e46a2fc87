"""A dispatch waits for the dispatches of the client's other waiting conversations.

A client whose conversations wait for their calls gathers their next turns into shared
round trips (and so shared worker messages): ``Company`` says how long a dispatch waits,
from the process's waits (``Pace``: how many wait now, how long a wait lasts) and how
often dispatches arrive. A conversation alone never waits.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

import pytest
import redis

from tests.apps import registry
from tests.conftest import Workers
from toolq import CallStatus, Client, Settings
from toolq.dispatch.commit import Company
from toolq.errors import WaitTimeoutError
from toolq.results.waits import Pace

pytestmark = pytest.mark.timeout(120)


def _pace(waiting: int, typical: float) -> Pace:
    pace = Pace()
    for _ in range(waiting):
        pace.begin()
    pace.typical = typical
    return pace


def _company(pace: Pace | None, gap: float, most: float = 0.005) -> Company:
    company = Company(pace, most)
    company.gap = gap
    return company


def test_company_is_waited_for_only_while_others_wait_and_arrive_sooner() -> None:
    # 32 conversations with 100 ms turns: one arrives every ~3 ms; wait the most, 5 ms.
    assert _company(_pace(31, 0.1), gap=0.003).linger() == 0.005
    # Nobody else waits (a conversation alone, a lone batch): never.
    assert _company(_pace(0, 0.1), gap=0.003).linger() == 0.0
    assert _company(None, gap=0.003).linger() == 0.0
    # Dispatches further apart than the wait would last: nobody would come.
    assert _company(_pace(3, 0.1), gap=0.02).linger() == 0.0
    # Fast turns: at most a quarter of a typical wait (8 ms turns: 2 ms).
    assert _company(_pace(7, 0.008), gap=0.0002).linger() == pytest.approx(0.002)
    # No wait has ended yet, or the setting is off.
    assert _company(_pace(5, 0.0), gap=0.0001).linger() == 0.0
    assert _company(_pace(31, 0.1), gap=0.003, most=0.0).linger() == 0.0


def test_only_other_threads_arrivals_set_the_gap() -> None:
    """A thread dispatching again and again, while another only waits, is no company for
    itself: it never waits for anyone."""
    company = Company(_pace(1, 0.1), 0.005)
    for _ in range(5):
        company.arrived()
    assert company.gap == float("inf")
    assert company.linger() == 0.0
    other = threading.Thread(target=company.arrived)
    other.start()
    other.join()
    company.arrived()
    assert company.gap < 0.5


def test_a_wait_nobody_joined_pauses_the_waiting() -> None:
    company = _company(_pace(31, 0.1), gap=0.003)
    company.gathered(0)
    assert [company.linger() for _ in range(Company.PAUSE_AFTER_ALONE)] == [0.0] * 8
    assert company.linger() == 0.005
    company.gathered(3)
    assert company.linger() == 0.005


def test_a_forked_child_does_not_count_the_parent_s_waits() -> None:
    """Before any wait of its own, a child's dispatches see none of the parent's waits."""
    pace = Pace()
    pace.begin()  # a thread of the parent waits at the fork
    pace.typical = 0.5
    company = _company(pace, gap=0.001)
    assert company.linger() == 0.005
    pid = os.fork()
    if pid == 0:
        os._exit(0 if pace.waiting == 0 and company.linger() == 0.0 else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert pace.waiting == 1


def _poll(check: Any, what: str) -> None:
    deadline = time.monotonic() + 30
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.005)


@pytest.mark.e2e
def test_waits_tell_the_pace_how_many_wait_and_how_long(
    r: redis.Redis, settings: Settings, workers: Workers
) -> None:
    workers.start("safe", concurrency=2)
    with Client(registry, settings) as client:
        pace = client.log.waits.pace
        batch = client.dispatch([{"id": "a", "name": "slow", "arguments": {"seconds": 0.3}}])
        assert pace.waiting == 0
        waited: list[Any] = []
        waiter = threading.Thread(target=lambda: waited.extend(batch.wait(timeout=60)))
        waiter.start()
        _poll(lambda: pace.waiting == 1, "the wait was never counted")
        waiter.join(60)
        assert [x.status for x in waited] == [CallStatus.SUCCEEDED]
        assert pace.waiting == 0
        assert 0.0 < pace.typical <= Pace.LONGEST_SECONDS
        typical = pace.typical
        # A wait given up (timed out) is no longer counted and says nothing of how long
        # waits last.
        late = client.dispatch([{"id": "b", "name": "slow", "arguments": {"seconds": 2}}])
        with pytest.raises(WaitTimeoutError):
            late.wait(timeout=0.05)
        assert pace.waiting == 0
        assert pace.typical == typical


@pytest.mark.e2e
def test_an_interrupted_wait_is_given_up(
    r: redis.Redis, settings: Settings, workers: Workers
) -> None:
    """Interrupted (a signal, Ctrl-C), a wait leaves the reader and the count of waits."""
    workers.start("safe", concurrency=2)

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        with Client(registry, settings) as client:
            batch = client.dispatch([{"id": "a", "name": "slow", "arguments": {"seconds": 2}}])
            signal.setitimer(signal.ITIMER_REAL, 0.2)
            with pytest.raises(KeyboardInterrupt):
                batch.wait(timeout=30)
            waits = client.log.waits
            assert waits.pace.waiting == 0
            assert waits.waiting == 0
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.e2e
def test_a_forked_child_counts_its_own_waits(
    r: redis.Redis, settings: Settings, workers: Workers
) -> None:
    """A child forked while the parent waits starts with no wait counted, and its dispatches
    read the waits it makes itself."""
    workers.start("safe", concurrency=2)
    with Client(registry, settings) as client:
        batch = client.dispatch([{"id": "a", "name": "slow", "arguments": {"seconds": 1}}])
        waiting = threading.Thread(target=batch.wait, kwargs={"timeout": 30})
        waiting.start()
        _poll(lambda: client.log.waits.pace.waiting == 1, "the wait was never counted")
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                child = client.dispatch([{"id": "b", "name": "noop", "arguments": {}}])
                results = child.wait(timeout=30)  # resets the waits: a new reader
                pace = client.log.waits.pace
                same = client.dispatcher.creates.company.pace is pace  # type: ignore[union-attr]
                ok = results[0].status is CallStatus.SUCCEEDED and same and pace.waiting == 0
                code = 0 if ok else 2
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        waiting.join(30)
        assert os.waitstatus_to_exitcode(status) == 0


@pytest.mark.e2e
def test_a_conversation_alone_never_waits_for_company(
    r: redis.Redis, settings: Settings, workers: Workers
) -> None:
    workers.start("safe", concurrency=2)
    with Client(registry, settings) as client:
        for turn in range(8):
            calls = [{"id": f"t{turn}-{i}", "name": "noop", "arguments": {}} for i in range(2)]
            results = client.dispatch(calls).wait(timeout=60)
            assert [x.status for x in results] == [CallStatus.SUCCEEDED] * 2
        creates = client.dispatcher.creates
        assert creates.lingered == 0
        assert creates.round_trips == creates.requests == 8


@pytest.mark.e2e
def test_waiting_conversations_gather_their_turns_into_shared_round_trips(
    r: redis.Redis, settings: Settings, workers: Workers
) -> None:
    """Eight conversations of 0.1 s turns: once a wait has ended, each dispatch waits for
    the others' (up to half a typical wait here, 0.2 s at most) and they share round trips;
    without that each would go alone, as the conversation alone above does."""
    workers.start("safe", concurrency=8)
    conversations, turns = 8, 4
    with Client(registry, settings.model_copy(update={"dispatch_linger": 0.2})) as client:
        creates = client.dispatcher.creates
        assert creates.company is not None
        creates.company.share = 0.5
        statuses: list[CallStatus] = []

        def conversation(n: int) -> None:
            for turn in range(turns):
                call = {"id": f"c{n}-{turn}", "name": "slow", "arguments": {"seconds": 0.1}}
                statuses.extend(x.status for x in client.dispatch([call]).wait(timeout=60))

        threads = [threading.Thread(target=conversation, args=(n,)) for n in range(conversations)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(90)
            assert not t.is_alive()
        assert statuses == [CallStatus.SUCCEEDED] * (conversations * turns)
        assert creates.requests == conversations * turns
        assert creates.lingered > 0
        assert creates.round_trips < creates.requests


@pytest.mark.e2e
def test_a_child_forked_while_the_parent_s_reader_holds_its_lock_still_waits(
    r: redis.Redis, settings: Settings, workers: Workers
) -> None:
    """The parent's reader thread takes the waits' lock on each read; a fork at that moment
    leaves the child a copy of the lock held by a thread it does not have. The child's own
    wait must not take that copy (it hung for ever, found beside a second copy of the suite)."""
    workers.start("safe", concurrency=2)
    with Client(registry, settings) as client:
        client.dispatch([{"id": "a", "name": "noop", "arguments": {}}]).wait(timeout=30)
        waits = client.log.waits
        held, release = threading.Event(), threading.Event()

        def reader_at_the_fork() -> None:
            with waits._lock:
                held.set()
                release.wait(30)

        holder = threading.Thread(target=reader_at_the_fork)
        holder.start()
        assert held.wait(30)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                signal.alarm(30)  # a hang ends the child (killed by SIGALRM), not the suite
                child = client.dispatch([{"id": "b", "name": "noop", "arguments": {}}])
                results = child.wait(timeout=20)
                code = 0 if results[0].status is CallStatus.SUCCEEDED else 2
            finally:
                os._exit(code)
        release.set()
        holder.join(30)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
