"""Where upstream sessions live in a process: one event loop thread, sessions per toolset.

``SessionLoop`` is one asyncio loop in a daemon thread per process (made again after a fork:
a prefork worker child never uses its parent's), so sessions do not depend on which loop
or thread a call runs on: ``call`` submits to it from any of them, and cancelling the
caller cancels the request there. ``Connections`` keeps one session per credential scope
of a toolset (shared, or one per tenant with tenant credentials), starting it on first use
and again after it ended (a crashed stdio server), no sooner than ``RESTART_DELAY`` after
the last start failed.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import os
import threading
import time
import weakref
from collections.abc import Callable, Coroutine
from typing import Any, ClassVar, TypeVar

from toolq.errors import UpstreamUnavailableError
from toolq.registry.upstream.session import Listed, UpstreamSession
from toolq.registry.upstream.transports import Opener, StdioExit

T = TypeVar("T")

RESTART_DELAY = 1.0
"""Seconds between a failed start of a server and the next attempt."""
EXIT_GRACE = 10.0
"""Seconds the process's exit waits for its sessions to close (stdio servers to stop)."""

Transport = Callable[[str | None], tuple[Opener, StdioExit | None]]
"""The transport of a session for a tenant: its opener, and how a stdio server ended."""


class SessionLoop:
    """The process's loop for upstream sessions, in a daemon thread started on first use."""

    _current: ClassVar[tuple[int, SessionLoop] | None] = None
    _lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(
            target=self.loop.run_forever, name="toolq-upstream", daemon=True
        )
        self.thread.start()
        self.connections: weakref.WeakSet[Connections] = weakref.WeakSet()
        # A daemon thread dies with the interpreter: stop the servers first, while it runs.
        atexit.register(self.shutdown)

    def shutdown(self) -> None:
        """Close the sessions of this process (at exit: stdio servers are stopped)."""
        if self._current is None or self._current[1] is not self or os.getpid() != self._current[0]:
            return  # a fork's copy: the sessions (and the thread) are the parent's
        for connections in list(self.connections):
            with contextlib.suppress(Exception):
                self.run(connections.close(), timeout=EXIT_GRACE)

    @classmethod
    def current(cls) -> SessionLoop:
        """The loop of this process (a forked child gets its own)."""
        with cls._lock:
            if cls._current is None or cls._current[0] != os.getpid():
                cls._current = (os.getpid(), cls())
            return cls._current[1]

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Run ``coro`` on the loop; cancelling the future cancels it."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop and wait for its value (not from the loop's own thread)."""
        return self.submit(coro).result(timeout)


def _fresh_lock() -> None:
    """A forked child's own lock: a thread of the parent may hold the parent's."""
    SessionLoop._lock = threading.Lock()


os.register_at_fork(after_in_child=_fresh_lock)


class Connections:
    """The sessions of one toolset in this process, by credential scope."""

    def __init__(
        self, server: str, transport: Transport, on_listed: Listed, connect_timeout: float
    ) -> None:
        self.server = server
        self.transport = transport
        self.on_listed = on_listed
        self.connect_timeout = connect_timeout
        self._pid = 0
        self._sessions: dict[str, UpstreamSession] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._failed_at: dict[str, float] = {}

    async def session(self, scope: str, tenant: str | None) -> UpstreamSession:
        """A live session for ``scope`` (the shared one lists tools for the registry)."""
        if self._pid != os.getpid():  # a forked child: its parent's sessions are not ours
            self._pid = os.getpid()
            self._sessions, self._locks, self._failed_at = {}, {}, {}
            SessionLoop.current().connections.add(self)
        found = self._sessions.get(scope)
        if found is not None and found.alive:
            return found
        async with self._locks.setdefault(scope, asyncio.Lock()):
            found = self._sessions.get(scope)
            if found is not None and found.alive:
                return found
            wait = self._failed_at.get(scope, 0.0) + RESTART_DELAY - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            opener, exit = self.transport(tenant)
            session = UpstreamSession(
                self.server,
                opener,
                exit=exit,
                on_listed=self.on_listed if scope == "" else None,
            )
            try:
                await session.start(self.connect_timeout)
            except UpstreamUnavailableError:
                self._failed_at[scope] = time.monotonic()
                raise
            self._sessions[scope] = session
            return session

    def alive(self, scope: str) -> UpstreamSession | None:
        """The live session of ``scope`` in this process, if it has one (none is started)."""
        if self._pid != os.getpid():
            return None
        found = self._sessions.get(scope)
        return found if found is not None and found.alive else None

    async def close(self) -> None:
        """Close every session of this process (stdio servers are stopped)."""
        sessions, self._sessions = list(self._sessions.values()), {}
        for session in sessions:
            await session.aclose()
