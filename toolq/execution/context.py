"""``ToolContext``: what a running handler knows about its call, and how it reports back."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Callable, Sequence
from typing import Any

from toolq.errors import CallCancelledError

ProgressSink = Callable[[Any], None]


class ToolContext:
    """Injected into any handler parameter annotated ``ToolContext``; hidden from the schema.

    ``cancelled`` turns true when the call is cancelled (durable flag seen by the worker);
    long handlers should look at it, or call ``check_cancelled()``. Subprocesses started with
    ``popen`` run in their own process group, which is killed on cancel and timeout.
    """

    def __init__(
        self,
        *,
        call_id: str = "",
        run_id: str = "",
        tool_call_id: str = "",
        tool_name: str = "",
        attempt: int = 1,
        behavior: str | None = None,
        principal: str | None = None,
        tenant: str | None = None,
        metadata: dict[str, Any] | None = None,
        progress_sink: ProgressSink | None = None,
    ) -> None:
        self.call_id = call_id
        self.run_id = run_id
        self.tool_call_id = tool_call_id
        self.tool_name = tool_name
        self.attempt = attempt
        self.behavior = behavior
        self.principal = principal
        self.tenant = tenant
        """The tenant the call is run for (None outside a worker: the default tenant)."""
        self.metadata: dict[str, Any] = dict(metadata or {})
        self._progress_sink = progress_sink
        self._cancelled = False
        self._woken: threading.Event | None = None
        """Made only when a handler sleeps on the context (``wait_cancelled``): most never do,
        and an event costs a condition and its lock for every call."""
        self._on_cancel: list[Callable[[], None]] = []
        self._lock = threading.Lock()
        self._groups: set[int] = set()

    @property
    def cancelled(self) -> bool:
        """True once the call has been cancelled or has timed out."""
        return self._cancelled

    def check_cancelled(self) -> None:
        """Raise ``CallCancelledError`` if the call was cancelled."""
        if self.cancelled:
            raise CallCancelledError(f"call {self.call_id} was cancelled")

    def wait_cancelled(self, timeout: float | None = None) -> bool:
        """Sleep up to ``timeout`` seconds, waking early on cancel; True if cancelled."""
        with self._lock:
            if self._woken is None:
                self._woken = threading.Event()
                if self._cancelled:
                    self._woken.set()
            woken = self._woken
        return woken.wait(timeout)

    def progress(self, data: Any) -> None:
        """Report progress; it becomes a ``call.progress`` event in order."""
        if self._progress_sink is not None:
            self._progress_sink(data)

    def popen(self, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        """Start a subprocess in a new process group that is killed on cancel or timeout."""
        kwargs.setdefault("start_new_session", True)
        proc = subprocess.Popen(list(argv), **kwargs)  # an argv list, never a shell
        with self._lock:
            self._groups.add(proc.pid)
        if self.cancelled:
            self.kill_processes()
        return proc

    def on_cancel(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` (from another thread) when the call is cancelled."""
        with self._lock:  # exactly once: by ``cancel`` later, or here if it went first
            now = self._cancelled
            if not now:
                self._on_cancel.append(callback)
        if now:
            callback()

    def kill_processes(self) -> None:
        """SIGKILL every process group started through ``popen``."""
        with self._lock:
            groups = list(self._groups)
        for pgid in groups:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)

    def cancel(self) -> None:
        """Mark the call cancelled, kill its process groups and run cancel callbacks."""
        with self._lock:
            if self._cancelled:
                return
            self._cancelled = True
            woken = self._woken
            callbacks = list(self._on_cancel)
        if woken is not None:
            woken.set()
        self.kill_processes()
        for callback in callbacks:
            callback()
