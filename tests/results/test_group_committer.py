"""``GroupCommitter``: each thread's request answered once, in one round trip at a time.

The committer is exercised with a ``_send`` of its own that records what each round trip
carried (the committer's threading, not Redis, is what these tests look at; the worker's
and the client's committers are tested against Redis in ``tests/workers`` and
``tests/dispatch``).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from toolq.results.group_commit import GroupCommitter, Request


@dataclass(eq=False)
class _Request(Request):
    n: int
    answer: int | None = None


@dataclass
class _Recorder(GroupCommitter[_Request]):
    """Answers each request with its number; the first round trip waits for ``go``."""

    go: threading.Event = field(default_factory=threading.Event)
    batches: list[list[int]] = field(default_factory=list)
    in_flight: int = 0
    most_in_flight: int = 0

    def __post_init__(self) -> None:
        super().__init__()

    def _send(self, batch: list[_Request]) -> None:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        if not self.batches:
            self.go.wait(10)
        time.sleep(0.002)
        self.batches.append([r.n for r in batch])
        for request in batch:
            request.answer = request.n
        self.in_flight -= 1


def _queued(committer: _Recorder, count: int) -> None:
    deadline = time.monotonic() + 10
    while len(committer._queue) < count:
        assert time.monotonic() < deadline, "requests never queued"
        time.sleep(0.001)


def test_every_thread_gets_its_own_answer_once() -> None:
    committer = _Recorder()
    committer.go.set()
    answers: dict[int, int | None] = {}

    def join(n: int) -> None:
        answers[n] = committer._join(_Request(n)).answer

    threads = [threading.Thread(target=join, args=(n,)) for n in range(40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert answers == {n: n for n in range(40)}
    sent = sorted(n for batch in committer.batches for n in batch)
    assert sent == list(range(40))
    assert committer.most_in_flight == 1
    assert committer.requests == 40


def test_requests_queued_behind_a_round_trip_go_together_in_the_next() -> None:
    committer = _Recorder()
    first = threading.Thread(target=committer._join, args=(_Request(0),))
    first.start()
    time.sleep(0.05)  # the first round trip is in flight, waiting for ``go``
    behind = [threading.Thread(target=committer._join, args=(_Request(n),)) for n in (1, 2, 3)]
    for t in behind:
        t.start()
    _queued(committer, 3)
    committer.go.set()
    for t in [first, *behind]:
        t.join(10)
        assert not t.is_alive()
    assert committer.batches[0] == [0]
    assert sorted(committer.batches[1]) == [1, 2, 3]


class _Interrupted(Exception):
    pass


@pytest.fixture
def alarm() -> Iterator[None]:
    def interrupt(signum: int, frame: object) -> None:
        raise _Interrupted

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_a_request_whose_thread_is_interrupted_is_taken_back(alarm: None) -> None:
    """The requests queued behind an interrupted one are still sent; it is not."""
    committer = _Recorder()
    first = threading.Thread(target=committer._join, args=(_Request(0),))
    first.start()
    time.sleep(0.05)  # the first round trip is in flight, waiting for ``go``
    after: list[int | None] = []

    def join_after() -> None:
        _queued(committer, 1)
        after.append(committer._join(_Request(2)).answer)

    later = threading.Thread(target=join_after)
    later.start()
    signal.setitimer(signal.ITIMER_REAL, 0.3)
    with pytest.raises(_Interrupted):
        committer._join(_Request(1))  # queued in this (the main) thread, then interrupted
    committer.go.set()
    for t in (first, later):
        t.join(10)
        assert not t.is_alive()
    assert after == [2]
    assert [n for batch in committer.batches for n in batch] == [0, 2]


@dataclass
class _Sociable(_Recorder):
    """A committer whose sender waits up to ``linger`` seconds for ``enough`` requests
    (the first ``waits`` senders: any, when None)."""

    linger: float = 0.0
    enough: int = 1
    waits: int | None = None

    def _company(self) -> float:
        if self.waits is not None:
            if self.waits <= 0:
                return 0.0
            self.waits -= 1
        return self.linger

    def _enough(self, queued: list[_Request]) -> bool:
        return len(queued) >= self.enough


def test_a_sender_waiting_for_company_carries_those_who_come_and_stops_at_enough() -> None:
    """The wait would last a minute: the test's own time limit fails it unless ``enough``
    requests joining end it."""
    committer = _Sociable(linger=60.0, enough=4)
    committer.go.set()
    answers: dict[int, int | None] = {}

    def join(n: int) -> None:
        answers[n] = committer._join(_Request(n)).answer

    first = threading.Thread(target=join, args=(0,))
    first.start()
    deadline = time.monotonic() + 10
    while not committer._lingering:
        assert time.monotonic() < deadline, "the sender never waited for company"
        time.sleep(0.001)
    others = [threading.Thread(target=join, args=(n,)) for n in (1, 2, 3)]
    for t in others:
        t.start()
    for t in [first, *others]:
        t.join(20)
        assert not t.is_alive()
    assert answers == {n: n for n in range(4)}
    assert sorted(committer.batches[0]) == [0, 1, 2, 3]
    assert committer.lingered == 1


def test_a_sender_whose_company_never_comes_sends_alone_when_its_wait_ends() -> None:
    committer = _Sociable(linger=0.05, enough=2)
    committer.go.set()
    assert committer._join(_Request(7)).answer == 7
    assert committer.batches == [[7]]
    assert committer.lingered == 1


def test_a_sender_with_enough_queued_already_does_not_wait() -> None:
    committer = _Sociable(linger=60.0, enough=1)
    committer.go.set()
    assert committer._join(_Request(1)).answer == 1
    assert committer.lingered == 0


def test_a_sender_interrupted_while_waiting_for_company_passes_on_its_turn(alarm: None) -> None:
    """The request queued behind it is sent (by its own thread); the interrupted one is not."""
    committer = _Sociable(linger=60.0, enough=99, waits=1)
    committer.go.set()
    after: list[int | None] = []

    def join_after() -> None:
        deadline = time.monotonic() + 10
        while not committer._lingering:
            assert time.monotonic() < deadline, "the sender never waited for company"
            time.sleep(0.001)
        after.append(committer._join(_Request(2)).answer)

    later = threading.Thread(target=join_after)
    later.start()
    signal.setitimer(signal.ITIMER_REAL, 0.3)
    with pytest.raises(_Interrupted):
        committer._join(_Request(1))  # this (the main) thread sends, waiting for company
    later.join(10)
    assert not later.is_alive()
    assert after == [2]
    assert committer.batches == [[2]]
    assert not committer._sending and not committer._queue


def test_a_forked_child_starts_with_nothing_in_flight() -> None:
    """A round trip in flight in the parent (its sender waiting for ``go``) is not the
    child's: the child's first request is sent at once instead of queueing behind it."""
    committer = _Recorder()
    first = threading.Thread(target=committer._join, args=(_Request(0),))
    first.start()
    _in_flight = time.monotonic() + 10
    while not committer._sending:
        assert time.monotonic() < _in_flight
        time.sleep(0.001)
    pid = os.fork()
    if pid == 0:  # the child: no thread of the parent runs here
        code = 1
        try:
            committer.batches.append([])  # not the first round trip: no wait for ``go``
            code = 0 if committer._join(_Request(5)).answer == 5 else 2
        finally:
            os._exit(code)
    try:
        _, status = os.waitpid(pid, 0)
    finally:
        committer.go.set()
        first.join(10)
    assert os.waitstatus_to_exitcode(status) == 0
