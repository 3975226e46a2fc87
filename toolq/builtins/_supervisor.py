"""The sandbox supervisor: ``python -I -S _supervisor.py CONFIG_JSON COMMAND...``.

Runs as its own script (standard library only, no toolq import) at the top of the call's
process group, started by the worker through ``ToolContext.popen``. It

* asks for SIGTERM when the worker thread that started it dies (``PR_SET_PDEATHSIG``);
* makes itself a child subreaper, so every orphaned descendant (also one that called
  ``setsid`` to leave the process group) is re-parented to it and can be found and reaped;
* with ``isolate``, first enters a new PID namespace, so the process it forks is the
  namespace's init (pid 1). That init enters new mount and IPC namespaces (and a new network
  namespace, whose only interface is a loopback left down, unless ``network``), makes every
  mount private, puts one size-capped tmpfs under ``/tmp``, ``/var/tmp``, ``/dev/shm`` and
  ``/run/lock``, copies the call's scratch files into it, mounts a fresh ``/proc`` that shows
  only the namespace, then forks the command and reaps every orphan of the namespace. When
  the command exits, init reports its status and exits, and the kernel kills whatever is
  left in the namespace;
* forks the command; the child drops privileges (``setgroups([])``, ``setgid``, ``setuid``),
  enters the working directory, lowers its resource limits, sets ``no_new_privs`` (no
  setuid bit or file capability raises what ``exec`` runs), installs the seccomp filter the
  worker built (``toolq/builtins/seccomp.py``, passed as hex) and ``exec``s the command
  (with ``probe``, it exits 0 there instead: the worker's start-up check);
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
PR_SET_SECCOMP = 22
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
SECCOMP_MODE_FILTER = 2
CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 0x40000
PRIVATE_DIRS = ("/var/tmp", "/dev/shm", "/run/lock", "/tmp")
"""World-writable host directories replaced by the call's tmpfs; ``/tmp`` last (it stages)."""
STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}
WATCHED = {*STOP_SIGNALS, signal.SIGCHLD}


LIBC = ctypes.CDLL(None, use_errno=True)


class SockFprog(ctypes.Structure):
    """``struct sock_fprog``: a BPF program's length (in instructions) and address."""

    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def report(fd: int, payload: dict[str, Any]) -> None:
    """Write one status line for the worker."""
    os.write(fd, (json.dumps(payload) + "\n").encode())


def outcome(status: int) -> dict[str, int]:
    """The status line for a wait status."""
    if os.WIFSIGNALED(status):
        return {"signal": os.WTERMSIG(status)}
    return {"exit": os.waitstatus_to_exitcode(status)}


def unshare(flags: int) -> None:
    """``unshare(2)``; Python 3.11 has no ``os.unshare``."""
    if LIBC.unshare(ctypes.c_int(flags)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def mount(source: str, target: str, fstype: str | None, flags: int, data: str | None) -> None:
    """``mount(2)``."""
    if (
        LIBC.mount(
            source.encode(),
            target.encode(),
            fstype.encode() if fstype else None,
            ctypes.c_ulong(flags),
            data.encode() if data else None,
        )
        != 0
    ):
        err = ctypes.get_errno()
        raise OSError(err, f"{os.strerror(err)} (mount {target})")


def confine(program: bytes) -> None:
    """Set ``no_new_privs`` and install the seccomp filter ``program`` (``sock_filter`` bytes).

    Both are inherited by every process the command starts, and neither can be undone.
    """
    code = ctypes.create_string_buffer(program, len(program))
    fprog = SockFprog(len(program) // 8, ctypes.cast(code, ctypes.c_void_p))
    for option, value in (
        (PR_SET_NO_NEW_PRIVS, ctypes.c_ulong(1)),
        (PR_SET_SECCOMP, ctypes.c_ulong(SECCOMP_MODE_FILTER)),
    ):
        extra = ctypes.byref(fprog) if option == PR_SET_SECCOMP else ctypes.c_ulong(0)
        if LIBC.prctl(ctypes.c_int(option), value, extra, ctypes.c_ulong(0), ctypes.c_ulong(0)):
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))


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


def child(
    config: dict[str, Any], argv: list[str], status_fd: int, running: int | None = None
) -> None:
    """In the forked child: drop privileges, enter cwd, lower limits, exec the command.

    ``running``: tasks of the sandbox uid already counted (the host's ``/proc`` may be gone).
    """
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
            allowed = config["processes"] + (tasks_of(os.getuid()) if running is None else running)
            resource.setrlimit(resource.RLIMIT_NPROC, (allowed, allowed))
        step = "confine the command (no_new_privs and the seccomp filter)"
        confine(bytes.fromhex(config["seccomp"]))
        if config.get("probe"):
            os._exit(0)
        step = f"run {argv[0]!r}"
        os.execvp(argv[0], argv)
    except OSError as exc:
        report(status_fd, {"error": f"could not {step}: {exc.strerror or exc}"})
        os._exit(127 if exc.errno == errno.ENOENT else 126)
    except BaseException as exc:
        report(status_fd, {"error": f"sandbox setup failed ({step}): {exc!r}"})
        os._exit(126)


def read_scratch(path: str) -> dict[str, bytes]:
    """The files the worker wrote into the call's scratch directory on the host."""
    found: dict[str, bytes] = {}
    for entry in os.scandir(path):
        if entry.is_file(follow_symlinks=False):
            with open(entry.path, "rb") as f:
                found[entry.name] = f.read()
    return found


def under_private_dir(path: str) -> bool:
    """Tell whether ``path`` lies in a directory the call's tmpfs replaces."""
    return any(path == d or path.startswith(d + "/") for d in PRIVATE_DIRS)


def private_mounts(config: dict[str, Any]) -> None:
    """Make mounts private, give the call its own tmpfs and a ``/proc`` of its namespace.

    A workspace inside a replaced directory (``/tmp/work``) is bound back at its path.
    """
    mount("none", "/", None, MS_REC | MS_PRIVATE, None)  # nothing we mount reaches the host
    workspace = os.path.realpath(config["workspace"])
    keep = os.open(workspace, os.O_PATH | os.O_DIRECTORY) if under_private_dir(workspace) else None
    size = int(config["tmp_bytes"])
    options = f"size={size},nr_inodes={max(1024, size // 4096)},mode=1777"
    mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, options)
    # One tmpfs, one budget: each private directory is a directory of it, bound in place.
    for target in PRIVATE_DIRS:
        if os.path.islink(target) or not os.path.isdir(target):
            continue  # absent, or a link into a directory handled on its own
        staged = "/tmp/" + target.strip("/").replace("/", "-")
        os.mkdir(staged)
        os.chmod(staged, 0o1777)
        mount(staged, target, None, MS_BIND, None)
    if keep is not None:
        os.makedirs(workspace, 0o755, exist_ok=True)
        mount(f"/proc/self/fd/{keep}", workspace, None, MS_BIND | MS_REC, None)  # the old /proc
        os.close(keep)
    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None)


def make_scratch(config: dict[str, Any], files: dict[str, bytes]) -> None:
    """Recreate the scratch directory inside the call's ``/tmp``, owned by the sandbox user."""
    scratch = config["scratch"]
    os.mkdir(scratch, 0o700)
    for name, data in files.items():
        fd = os.open(os.path.join(scratch, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
    if config["uid"] is not None:
        os.chown(scratch, config["uid"], config["gid"])


def init(config: dict[str, Any], argv: list[str], status_fd: int) -> None:
    """Pid 1 of the call's namespaces: set them up, run the command, reap, report, exit."""
    step = "create namespaces (unshare)"
    try:
        LIBC.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)  # the supervisor died
        flags = CLONE_NEWNS | CLONE_NEWIPC | (0 if config["network"] else CLONE_NEWNET)
        unshare(flags)
        step = "read the scratch files"
        files = read_scratch(config["files"])
        step = "count the sandbox user's processes"
        running = tasks_of(config["uid"] if config["uid"] is not None else os.getuid())
        step = "mount the private /tmp and /proc"
        private_mounts(config)
        step = "create the scratch directory"
        make_scratch(config, files)
    except BaseException as exc:
        text = exc.strerror if isinstance(exc, OSError) and exc.strerror else repr(exc)
        report(status_fd, {"error": f"could not {step}: {text}", "isolation": True})
        os._exit(126)
    pid = os.fork()
    if pid == 0:
        child(config, argv, status_fd, running)
    while True:
        reaped, status = os.waitpid(-1, 0)  # orphans of the namespace come here too
        if reaped == pid:
            report(status_fd, outcome(status))
            os._exit(0)  # the kernel now kills the rest of the namespace


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
    LIBC.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    LIBC.prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)  # the worker died: clean up
    if os.getppid() != config["parent"]:
        report(status_fd, {"error": "the worker exited before the command started"})
        return
    isolate = bool(config["isolate"])
    if isolate:
        try:
            unshare(CLONE_NEWPID)  # our next child is the namespace's init
        except OSError as exc:
            error = f"could not create namespaces (unshare): {exc.strerror}"
            report(status_fd, {"error": error, "isolation": True})
            return
    pid = os.fork()
    if pid == 0:
        if isolate:
            init(config, argv, status_fd)
        child(config, argv, status_fd)
    status = supervise(pid)
    kill_tree()
    if status is None:
        report(status_fd, {"signal": int(signal.SIGKILL), "stopped": True})
    elif not isolate or os.WIFSIGNALED(status):  # a killed init could not report
        report(status_fd, outcome(status))


if __name__ == "__main__":
    main()
