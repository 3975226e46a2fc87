"""Helpers for the built-in tool tests."""

from __future__ import annotations

import os
from pathlib import Path


def live_processes(marker: str, program: str = "") -> list[int]:
    """Pids of non-zombie processes whose command line contains ``marker``.

    With ``program``, only those whose command line starts with it (``"sleep"``).
    """
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{name}/cmdline").read_bytes()
            stat = Path(f"/proc/{name}/stat").read_bytes()
        except OSError:
            continue
        state = stat[stat.rfind(b")") + 2 :].split()[0]
        if program and not cmdline.startswith(program.encode() + b"\x00"):
            continue
        if marker.encode() in cmdline and state not in (b"Z", b"X"):
            found.append(int(name))
    return found


def private_uid() -> int:
    """A uid no other process on this host uses: this test process's own.

    ``RLIMIT_NPROC`` counts a uid's processes host-wide, so a fork bomb under the shared
    default (nobody) spends the budget of every other sandbox running as nobody at the time,
    the concurrent test runs of other checkouts included.
    """
    return 1_000_000 + os.getpid()
