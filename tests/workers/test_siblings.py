"""``Threads`` and ``EventLoop``: where a batch message's calls run in a worker process."""

from __future__ import annotations

import asyncio
import threading
import time

from toolq.workers import siblings
from toolq.workers.siblings import EventLoop, Threads


def test_threads_run_every_call_at_once_and_reuse_idle_threads():
    threads = Threads()
    barrier = threading.Barrier(20, timeout=5)  # breaks unless all 20 run at the same time
    futures = [
        threads.submit(lambda: (barrier.wait(), threading.get_ident())[1]) for _ in range(20)
    ]
    names = [f.result(10) for f in futures]
    assert len(set(names)) == 20
    time.sleep(0.1)  # all idle again
    again = {threads.submit(threading.get_ident).result(5) for _ in range(50)}
    assert again <= set(names)  # no new thread while idle ones wait


def test_idle_threads_end(monkeypatch):
    monkeypatch.setattr(siblings, "IDLE_SECONDS", 0.2)
    threads = Threads(name="toolq-idle-test")
    assert threads.submit(lambda: 1).result(5) == 1
    time.sleep(0.8)
    assert not [t for t in threading.enumerate() if t.name == "toolq-idle-test"]
    assert threads.submit(lambda: 2).result(5) == 2  # a new one starts when needed


def test_errors_reach_the_future():
    def boom() -> None:
        raise ValueError("x")

    future = Threads().submit(boom)
    assert isinstance(future.exception(5), ValueError)


def test_one_loop_runs_many_coroutines_at_once():
    # Side by side, not one after another: no coroutine ends before all 500 have started
    # (run one at a time, the first would wait for the others until its timeout).
    loop = EventLoop()
    started = 0
    everyone = asyncio.Event()

    async def gather_all() -> int:
        nonlocal started
        started += 1
        if started == 500:
            everyone.set()
        await asyncio.wait_for(everyone.wait(), 30)
        return threading.get_ident()

    idents = {f.result(60) for f in [loop.submit(gather_all()) for _ in range(500)]}
    assert started == 500
    assert len(idents) == 1 and idents != {threading.get_ident()}


def test_a_batch_of_coroutines_reaches_the_loop_in_one_wake_up(monkeypatch):
    loop = EventLoop()
    running = loop.loop()
    gate = threading.Event()
    running.call_soon_threadsafe(gate.wait, 5)  # the loop waits until the futures are set up
    wake_ups = []
    wake = running.call_soon_threadsafe
    monkeypatch.setattr(
        running, "call_soon_threadsafe", lambda *a, **k: (wake_ups.append(a), wake(*a, **k))[1]
    )
    ran = []

    async def echo(i: int) -> int:
        ran.append(i)
        await asyncio.sleep(0.01)
        if i == 3:
            raise ValueError(i)
        return i

    futures = loop.submit_many([echo(i) for i in range(16)])
    futures[5].cancel()  # before the loop got to it: never started
    gate.set()
    assert isinstance(futures[3].exception(5), ValueError)
    assert [f.result(5) for i, f in enumerate(futures) if i not in (3, 5)] == [
        i for i in range(16) if i not in (3, 5)
    ]
    assert futures[5].cancelled() and 5 not in ran
    assert len(wake_ups) == 1  # one per coroutine before: 16
    loop.close()
