"""The sandbox supervisor: ``python -I -S _supervisor.py CONFIG_JSON COMMAND...``.

Runs as its own script (standard library only, no toolq import) at the top of the call's
process group, started by the worker through ``ToolContext.popen``. It

* asks for SIGTERM when the worker thread that started it dies (``PR_SET_PDEATHSIG``);
* makes itself a child subreaper, so every orphaned descendant (also one that called
  ``setsid`` to leave the process group) is re-parented to it and can be found and reaped;
* forks the command; the child drops privileges (``setgroups([])``, ``setgid``, ``setuid``),
  enters the working directory, lowers its resource limits and ``exec``s the command;
* when the command exits, or on SIGTERM (the worker's timeout), freezes every descendant
  with SIGSTOP (repeated until no new process appears, so a fork bomb cannot outrun it),
  SIGKILLs them all and reaps them, so no process and no zombie outlives the call;
* reports one JSON line on the status descriptor: ``{"exit": n}``, ``{"signal": n}`` or
  ``{"error": "..."}`` when the command could not be started.

Being single-threaded, it can run Python between ``fork`` and ``exec`` safely (unlike
``preexec_fn`` in a threaded worker).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import resource
import signal
import sys
import time
from typing import Any

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}
WATCHED = {*STOP_SIGNALS, signal.SIGCHLD}


def report(fd: int, payload: dict[str, Any]) -> None:
    """Write one status line for the worker."""
    os.write(fd, (json.dumps(payload) + "\n").encode())


def tasks_of(uid: int) -> int:
    """Tasks (threads included, as RLIMIT_NPROC counts them) whose real uid is ``uid``."""
    total = 0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status", "rb") as f:
                lines = f.read().splitlines()
        except OSError:
            continue
        fields = dict(line.split(b":", 1) for line in lines if b":" in line)
        if int(fields[b"Uid"].split()[0]) == uid:
            total += int(fields.get(b"Threads", b"1").strip() or b"1")
    return total


def child(config: dict[str, Any], argv: list[str], status_fd: int) -> None:
    """In the forked child: drop privileges, enter cwd, lower limits, exec the command."""
    step = "reset signals"
    try:
        for signum in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGXCPU):
            signal.signal(signum, signal.SIG_DFL)  # Python ignores some; exec would keep that
        signal.pthread_sigmask(signal.SIG_SETMASK, set())
        step = "drop privileges"
        if config["gid"] is not None:
            os.setgroups([])
            os.setresgid(config["gid"], config["gid"], config["gid"])
        if config["uid"] is not None:
            os.setresuid(config["uid"], config["uid"], config["uid"])
        step = f"enter the working directory {config['cwd']}"
        os.chdir(config["cwd"])
        step = "set resource limits"
        for name, value in config["limits"].items():
            which = getattr(resource, name)
            hard = resource.getrlimit(which)[1]
            grace = 1 if name == "RLIMIT_CPU" else 0  # SIGXCPU at soft, SIGKILL at hard
            top = value + grace if hard == resource.RLIM_INFINITY else min(value + grace, hard)
            resource.setrlimit(which, (min(value, top), top))
        if config["processes"] is not None:
            # RLIMIT_NPROC counts every task of the uid: allow this many beyond those running.
            allowed = config["processes"] + tasks_of(os.getuid())
            resource.setrlimit(resource.RLIMIT_NPROC, (allowed, allowed))
        step = f"run {argv[0]!r}"
        os.execvp(argv[0], argv)
    except OSError as exc:
        report(status_fd, {"error": f"could not {step}: {exc.strerror or exc}"})
        os._exit(127 if exc.errno == errno.ENOENT else 126)
    except BaseException as exc:
        report(status_fd, {"error": f"sandbox setup failed ({step}): {exc!r}"})
        os._exit(126)


def descendants() -> set[int]:
    """Live processes below this one, by their parent links."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                data = f.read()
        except OSError:
            continue
        fields = data[data.rfind(b")") + 2 :].split()
        if fields[0] in (b"Z", b"X"):
            continue
        children.setdefault(int(fields[1]), []).append(int(name))
    found: set[int] = set()
    stack = [os.getpid()]
    while stack:
        for pid in children.get(stack.pop(), ()):
            if pid not in found:
                found.add(pid)
                stack.append(pid)
    return found


def signal_all(pids: set[int], signum: int) -> None:
    """Send a signal to each pid, ignoring those already gone."""
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signum)


def reap(main: int) -> tuple[bool, int | None]:
    """Reap exited children without blocking: (none left, wait status of ``main`` if seen)."""
    status = None
    while True:
        try:
            pid, code = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return True, status
        if pid == 0:
            return False, status
        if pid == main:
            status = code


def kill_tree() -> None:
    """Freeze every descendant (until no new one appears), SIGKILL them all, reap them."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        stopped: set[int] = set()
        while True:
            fresh = descendants() - stopped
            if not fresh:
                break
            signal_all(fresh, signal.SIGSTOP)
            stopped |= fresh
        signal_all(stopped, signal.SIGKILL)
        time.sleep(0.01)
        if reap(-1)[0] and not descendants():
            return
        time.sleep(0.02)


def supervise(pid: int) -> int | None:
    """Wait for the command (reaping orphans meanwhile); None if told to stop first."""
    while True:
        info = signal.sigtimedwait(WATCHED, 1.0)
        if info is not None and info.si_signo in STOP_SIGNALS:
            return None
        _, status = reap(pid)
        if status is not None:
            return status


def main() -> None:
    """Run the command given on the command line under the configured limits."""
    config = json.loads(sys.argv[1])
    argv = sys.argv[2:]
    status_fd = int(config["status_fd"])
    os.set_inheritable(status_fd, False)
    signal.pthread_sigmask(signal.SIG_BLOCK, WATCHED)  # taken with sigtimedwait: no races
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)  # the worker died: clean up
    if os.getppid() != config["parent"]:
        report(status_fd, {"error": "the worker exited before the command started"})
        return
    pid = os.fork()
    if pid == 0:
        child(config, argv, status_fd)
    status = supervise(pid)
    kill_tree()
    if status is None:
        report(status_fd, {"signal": int(signal.SIGKILL), "stopped": True})
    elif os.WIFSIGNALED(status):
        report(status_fd, {"signal": os.WTERMSIG(status)})
    else:
        report(status_fd, {"exit": os.waitstatus_to_exitcode(status)})


if __name__ == "__main__":
    main()
