"""Where a batch message's calls run in a worker process: threads, and one event loop.

``Threads`` runs synchronous handlers, one daemon thread per call at a time, reused (a
new thread only when none is idle), so a message's calls run side by side and no call
waits for a slot behind another. ``EventLoop`` runs the coroutines of ``async def``
handlers: one loop per process, in its own daemon thread, so hundreds of I/O-bound calls
share one thread instead of holding one each. Daemon threads: a handler that ignores its
time limit never holds up the process's exit.
"""

from __future__ import annotations

import asyncio
import functools
import queue
import threading
from collections.abc import Callable, Coroutine, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")

IDLE_SECONDS = 60.0
"""A sibling thread idle this long ends (the next busy moment starts new ones)."""
LOOP_HELPER_THREADS = 256
"""Threads of the loop's default executor (``asyncio.to_thread``: retry back-off waits)."""


class Threads:
    """Daemon threads for synchronous calls, grown on demand and reused."""

    def __init__(
        self, name: str = "toolq-sibling", on_exit: Callable[[], None] | None = None
    ) -> None:
        self.name = name
        self.on_exit = on_exit
        """Called by each thread as it ends (to close what it opened for itself)."""
        self._work: queue.SimpleQueue[tuple[Future[Any], Callable[..., Any], tuple[Any, ...]]]
        self._work = queue.SimpleQueue()
        self._idle = 0
        self._lock = threading.Lock()

    def submit(self, func: Callable[..., T], *args: Any) -> Future[T]:
        """Run ``func(*args)`` on an idle thread, or a new one; its future."""
        future: Future[T] = Future()
        with self._lock:
            spawn = self._idle == 0
            if not spawn:
                self._idle -= 1  # that thread's, with the work below
            self._work.put((future, func, args))
        if spawn:
            threading.Thread(target=self._serve, name=self.name, daemon=True).start()
        return future

    def _serve(self) -> None:
        while True:
            try:
                future, func, args = self._work.get(timeout=IDLE_SECONDS)
            except queue.Empty:
                with self._lock:
                    # Work and its reservation are put together under the lock: with no
                    # work waiting, this thread is one of the idle ones, and may go.
                    if self._work.empty():
                        self._idle -= 1
                        break
                continue
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(func(*args))
                except BaseException as exc:
                    future.set_exception(exc)
            with self._lock:
                self._idle += 1
        if self.on_exit is not None:
            self.on_exit()


class EventLoop:
    """One asyncio loop in a daemon thread, started on first use (after a prefork fork)."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def submit(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        """Schedule ``coro`` on the loop; its (thread-safe) future."""
        return self.submit_many([coro])[0]

    def submit_many(self, coros: Sequence[Coroutine[Any, Any, T]]) -> list[Future[T]]:
        """Schedule ``coros`` on the loop with one wake-up; their (thread-safe) futures.

        Each wake-up from another thread is a write to the loop's self-pipe and a hand-off
        of the GIL to the loop's thread and back: one per coroutine
        (``asyncio.run_coroutine_threadsafe`` each) cost a batch message's thread about a
        tenth of its time (``bench.probes.async_timeline``). A future cancelled before the loop
        gets to it never starts its coroutine.
        """
        if not coros:
            return []  # a worker of synchronous tools never starts the loop
        loop = self.loop()
        futures: list[Future[T]] = [Future() for _ in coros]

        def start() -> None:
            for coro, future in zip(coros, futures, strict=True):
                if future.cancelled():
                    coro.close()
                    continue
                try:
                    task = loop.create_task(coro)
                except Exception as exc:  # as run_coroutine_threadsafe: the future gets it
                    coro.close()
                    if future.set_running_or_notify_cancel():
                        future.set_exception(exc)
                    continue
                task.add_done_callback(functools.partial(_settle, future))

        loop.call_soon_threadsafe(start)
        return futures

    def loop(self) -> asyncio.AbstractEventLoop:
        """The running loop, started if needed."""
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                loop.set_default_executor(
                    ThreadPoolExecutor(LOOP_HELPER_THREADS, thread_name_prefix="toolq-loop-helper")
                )
                self._thread = threading.Thread(
                    target=loop.run_forever, name="toolq-event-loop", daemon=True
                )
                self._thread.start()
                self._loop = loop
            return self._loop

    def close(self) -> None:
        """Stop and close the loop, if it was started (a worker process just exits)."""
        with self._lock:
            loop, thread, self._loop, self._thread = self._loop, self._thread, None, None
        if loop is None or thread is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        if not thread.is_alive():
            loop.close()


def _settle(future: Future[T], task: asyncio.Task[T]) -> None:
    """Give ``future`` the outcome of the loop's ``task`` (as ``run_coroutine_threadsafe``)."""
    if task.cancelled():
        future.cancel()
    if not future.set_running_or_notify_cancel():
        return
    error = task.exception()
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(task.result())
