"""``TestWorker``: a worker in the test's own process, for tests that need no process boundary.

It reads the real Celery messages from the risk queues in Redis with kombu's own channel
(``basic_get``: the message goes to kombu's ``unacked`` bookkeeping as a consumer's does)
and runs each through Celery's ``Request.execute``, which calls the app's one task and so
``WorkerRuntime``: START under a lease, approval check, sealed secrets, the executor,
FINISH, events, undo, previews. Then it acknowledges the message as a worker does, so the
sweeper never takes a message it ran for a lost one. No eager mode, nothing mocked.

    with TestWorker(settings, registry) as worker:
        batch = client.dispatch(response, run_id="r1")
        worker.drain()            # run every queued call, here, now
        worker.sweep()            # one sweeper pass: expire approvals, re-send, recover
        with worker.run_in_thread():  # drains in background threads meanwhile
            client.approvals.approve(call_id, by="alice")
            batch.wait(timeout=5)

What it does not do: hard time limits (Celery kills a pool process; here a call runs to
its own timeout), pools, process death. Test those with ``toolq worker`` processes.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from celery.worker.request import Request
from kombu.serialization import prepare_accept_content

from toolq.backend import Backend
from toolq.keys import Keys
from toolq.models import RiskLevel
from toolq.registry.registry import ToolRegistry
from toolq.settings import Settings
from toolq.workers.app import create_celery
from toolq.workers.maintenance import Maintenance

__all__ = ["TestWorker"]

log = logging.getLogger("toolq.testing")

IDLE_POLL = 0.02
"""Seconds between polls of empty queues (background threads, and ``drain(settle=...)``)."""


class TestWorker:
    """Runs the calls queued for ``levels`` in this process, through the worker's task code."""

    __test__ = False  # a library class, not a pytest test class

    def __init__(
        self,
        settings: Settings,
        registry: ToolRegistry,
        *,
        levels: Sequence[RiskLevel] | None = None,
        hostname: str | None = None,
    ) -> None:
        self.settings = settings
        self.registry = registry
        self.app = create_celery(settings, registry)
        self._accept = prepare_accept_content(self.app.conf.accept_content)
        keys = Keys(settings.key_prefix)
        self.levels = list(levels) if levels is not None else list(RiskLevel)
        self.queues = [keys.queue_for(level) for level in self.levels]
        self.hostname = hostname or f"toolq-testing-{os.getpid()}@{socket.gethostname()}"
        self.processed = 0
        self._count_lock = threading.Lock()
        self._maintenance: Maintenance | None = None
        self._threads: list[threading.Thread] = []
        self._stopping = threading.Event()
        self._sweeper: Maintenance | None = None

    # -- running messages -------------------------------------------------------------------

    def drain(self, *, timeout: float = 30.0, settle: float = 0.0) -> int:
        """Run queued messages until the queues are empty; the number of messages taken.

        ``settle``: then keep polling until no message came for that many seconds (calls
        that approvals, sweeps or other threads enqueue meanwhile). ``TimeoutError`` if the
        queues are still not empty after ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        ran = 0
        with self.app.connection_for_read() as connection, self._thread_loop():
            channel = connection.default_channel
            quiet_since = time.monotonic()
            while True:
                if self._run_one(connection, channel):
                    ran += 1
                    quiet_since = time.monotonic()
                elif time.monotonic() - quiet_since >= settle:
                    return ran
                else:
                    time.sleep(IDLE_POLL)
                if time.monotonic() > deadline:
                    raise TimeoutError(f"queues {self.queues} not drained in {timeout} s")

    @contextmanager
    def _thread_loop(self) -> Iterator[None]:
        """Close the event loop the runtime made for this thread once it stops draining.

        A worker's threads live as long as their process; a test's do not, and a loop
        left to the garbage collector warns (an error under ``filterwarnings = error``).
        """
        try:
            yield
        finally:
            self.app.toolq_runtimes.get().release_thread()

    def _run_one(self, connection: Any, channel: Any) -> bool:
        """Take one message from the first non-empty queue and run it; False if all empty."""
        for queue in self.queues:
            message = channel.basic_get(queue, no_ack=False)
            if message is not None:
                self._execute(connection, message)
                return True
        return False

    def _execute(self, connection: Any, message: Any) -> None:
        """Run one message as the worker's consumer would, then acknowledge it."""
        task = self.app.tasks.get(message.headers.get("task"))
        # As Celery's consumer does: only accepted content types are decoded (JSON: a
        # pickle message is never unpickled), and a message it cannot run is dropped.
        message.accept = self._accept
        try:
            message.payload  # noqa: B018 - decodes, refusing what is not accepted
        except Exception as exc:
            name = message.headers.get("task")
            log.error("message refused (%s, %s): %s", message.content_type, name, exc)
            message.reject_log_error(log, connection.connection_errors)
            return
        if task is None:
            log.error("message for unknown task %r dropped", message.headers.get("task"))
            message.reject_log_error(log, connection.connection_errors)
            return
        request = Request(
            message,
            on_ack=lambda logger, errors: message.ack_log_error(logger, errors),
            on_reject=lambda logger, errors, requeue: message.reject_log_error(
                logger, errors, requeue
            ),
            app=self.app,
            hostname=self.hostname,
            task=task,
            connection_errors=connection.connection_errors,
        )
        request.execute()
        with self._count_lock:
            self.processed += 1

    def sweep(self) -> dict[str, int]:
        """One pass of the workers' sweeper: expire approvals, recover, re-send."""
        if self._sweeper is None:
            self._sweeper = self._new_maintenance(1)
        return self._sweeper.sweeper.sweep()

    # -- in the background ------------------------------------------------------------------

    def start(self, concurrency: int = 2, *, maintenance: bool = True) -> None:
        """Keep draining in ``concurrency`` threads until ``stop``.

        ``maintenance``: also run the worker's maintenance thread (heartbeat under
        ``hostname``, a sweep every ``sweep_interval``, webhook delivery), as a worker does.
        """
        if self._threads:
            raise RuntimeError("TestWorker already started")
        self._stopping.clear()
        if maintenance:
            self._maintenance = self._new_maintenance(concurrency)
            self._maintenance.heartbeat()  # seen alive when start returns, as a worker is
            self._maintenance.start()
        for n in range(concurrency):
            thread = threading.Thread(target=self._consume, name=f"toolq-testing-{n}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def _consume(self) -> None:
        with self.app.connection_for_read() as connection, self._thread_loop():
            channel = connection.default_channel
            while not self._stopping.is_set():
                try:
                    if not self._run_one(connection, channel):
                        self._stopping.wait(IDLE_POLL)
                except Exception:  # a worker's consumer survives a bad message too
                    log.exception("in-process worker step failed")
                    self._stopping.wait(IDLE_POLL)

    def stop(self, timeout: float = 30.0) -> None:
        """Let running calls finish, then stop the threads ``start`` began."""
        self._stopping.set()
        for thread in self._threads:
            thread.join(timeout)
        self._threads = []
        if self._maintenance is not None:
            self._maintenance.stop()
            self._maintenance.join(timeout)
            self._maintenance.redis.close()
            self._maintenance = None

    @contextmanager
    def run_in_thread(self, concurrency: int = 2, *, maintenance: bool = True) -> Iterator[None]:
        """``start`` for the block, ``stop`` after it."""
        self.start(concurrency, maintenance=maintenance)
        try:
            yield
        finally:
            self.stop()

    def _new_maintenance(self, concurrency: int) -> Maintenance:
        # A backend over this worker's app (as MaintenanceStep builds one); its Redis client
        # is closed with the maintenance, the app by ``close``.
        return Maintenance(
            Backend(self.settings, self.registry, celery=self.app),
            hostname=self.hostname,
            queues=self.queues,
            pool="in-process",
            concurrency=concurrency,
        )

    # -- lifetime ---------------------------------------------------------------------------

    def close(self) -> None:
        """Stop background threads, close the runtime and the broker connections."""
        self.stop()
        if self._sweeper is not None:
            self._sweeper.redis.close()
            self._sweeper = None
        self.app.toolq_runtimes.close()
        self.app.close()

    def __enter__(self) -> TestWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
