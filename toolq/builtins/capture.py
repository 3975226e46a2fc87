"""A sandboxed command's output, read while it runs (see ``toolq.builtins.sandbox``).

Both pipes are captured up to a cap and streamed as progress; the supervisor is told to stop
at the deadline or on cancel, and its process group is killed if it does not.
"""

from __future__ import annotations

import codecs
import contextlib
import os
import selectors
import signal
import subprocess
import time
from typing import IO

from toolq.execution.context import ToolContext

STOP_GRACE = 3.0
"""Seconds the supervisor gets to clean up after SIGTERM before the group is SIGKILLed."""
DRAIN_AFTER_EXIT = 1.0
"""Seconds to keep reading pipes after the supervisor exited (an escaped holder)."""


class Capture:
    """One pipe: captured up to a cap, decoded incrementally, streamed as progress."""

    def __init__(self, name: str, pipe: IO[bytes], cap: int, ctx: ToolContext) -> None:
        self.name = name
        self.fd = pipe.fileno()
        self.cap = cap
        self.ctx = ctx
        self.kept = 0
        self.truncated = False
        self.text: list[str] = []
        self.pending = ""
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, data: bytes) -> None:
        """Take bytes read from the pipe (what is past the cap is dropped)."""
        room = self.cap - self.kept
        if len(data) > room:
            self.truncated = True
            data = data[:room]
        if not data:
            return
        self.kept += len(data)
        self._emit(self.decoder.decode(data))

    def close(self) -> None:
        """The pipe ended: decode and send what is left."""
        self._emit(self.decoder.decode(b"", final=True), final=True)

    def _emit(self, text: str, final: bool = False) -> None:
        self.text.append(text)
        self.pending += text
        cut = len(self.pending) if final else self.pending.rfind("\n") + 1
        if cut == 0 and len(self.pending) >= 4096:
            cut = len(self.pending)  # a very long line: send what there is
        out, self.pending = self.pending[:cut], self.pending[cut:]
        if out:
            # A failing progress sink (Redis away) must not stop us reading and reaping.
            with contextlib.suppress(Exception):
                self.ctx.progress({"stream": self.name, "text": out})

    def value(self) -> str:
        """Everything captured, as text."""
        return "".join(self.text)


def pump(
    proc: subprocess.Popen[bytes], streams: list[Capture], ctx: ToolContext, deadline: float
) -> bool:
    """Read both pipes until EOF, stopping the tree at the deadline; True if it timed out."""
    timed_out = False
    stop_sent: float | None = None
    exited_at: float | None = None
    with selectors.DefaultSelector() as selector:
        for stream in streams:
            selector.register(stream.fd, selectors.EVENT_READ, stream)
        while selector.get_map():
            now = time.monotonic()
            if stop_sent is None and (now >= deadline or ctx.cancelled):
                timed_out = not ctx.cancelled
                stop_sent = now
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGTERM)  # the supervisor kills the tree
            if stop_sent is not None and now - stop_sent > STOP_GRACE:
                kill_group(proc)
            if exited_at is None and exited(proc):
                exited_at = now
            if exited_at is not None and now - exited_at > DRAIN_AFTER_EXIT:
                break  # something escaped the tree and still holds a pipe: stop reading
            for key, _ in selector.select(0.05):
                stream = key.data
                data = os.read(stream.fd, 65536)
                if data:
                    stream.feed(data)
                else:
                    selector.unregister(stream.fd)
    if not exited(proc, timeout=STOP_GRACE):
        kill_group(proc)
    kill_group(proc)  # stragglers still in the group; the leader is unreaped, no reuse
    proc.wait()
    return timed_out


def exited(proc: subprocess.Popen[bytes], timeout: float | None = None) -> bool:
    """Tell whether the supervisor exited, without reaping it (its pid stays reserved)."""
    end = time.monotonic() + (timeout or 0)
    while True:
        try:
            info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return True
        if info is not None:
            return True
        if time.monotonic() >= end:
            return False
        time.sleep(0.02)


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the supervisor's process group (it heads the group, unreaped)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
