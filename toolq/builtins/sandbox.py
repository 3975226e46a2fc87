"""``Sandbox``: run one command under limits, as an unprivileged user, and capture its output.

The model, and what it does not promise:

* **Process tree.** The worker starts a small supervisor (``_supervisor.py``, run with
  ``python -I -S``) at the head of a new session and process group. The supervisor is a
  child subreaper: orphaned descendants, even ones that ``setsid`` out of the group, are
  re-parented to it. When the command exits, times out or is cancelled (the worker sends
  the supervisor SIGTERM; it also gets SIGTERM if the worker dies), it freezes every
  descendant with SIGSTOP, SIGKILLs them and reaps them: no process outlives the call, and
  no zombie is left to count against ``RLIMIT_NPROC`` even under an init that does not
  reap. If the supervisor has not finished within ``STOP_GRACE`` seconds the worker
  SIGKILLs the whole process group. (Not ``ToolContext.popen``: its immediate SIGKILL of
  the group on cancel would kill the supervisor before it reaps.)
* **Identity.** When the worker runs as root, the command runs as ``SandboxLimits.user`` /
  ``group`` (default 65534, "nobody"), with no supplementary groups, so it has no
  capabilities (and, with ``no_new_privs``, no setuid binary gives it root back) and
  ``RLIMIT_NPROC`` (a per-uid count) contains a fork bomb. Give each worker
  host a uid nothing else uses: processes of that uid from concurrent calls share the budget.
  As a non-root user no identity change is possible: the command runs as the worker's user
  and may read what that user can (its files, ``/proc/<worker>/environ``); the process cap
  is then "this many more than the user already runs".
* **Namespaces** (``isolation="namespaces"``, the default). Each call gets its own PID,
  mount, IPC and network namespaces (set up by the supervisor, see ``_supervisor.py``):

  - *network*: the only interface is a loopback that stays down, so nothing is reachable,
    not Redis or the API on ``127.0.0.1`` either (abstract Unix sockets are per namespace
    too). ``network=True`` keeps the worker's network namespace instead: the command then
    reaches what the worker reaches.
  - *temporary files*: ``/tmp``, ``/var/tmp``, ``/dev/shm`` and ``/run/lock`` are one fresh
    tmpfs of ``SandboxLimits.tmp_bytes``, gone with the call (a workspace below one of them
    is bound back at its path); mounts are private, so nothing propagates to the host.
  - *processes*: a new ``/proc`` shows the call's own processes only; other processes'
    command lines, environments and pids are out of sight and out of reach of signals.
    The namespace's init reaps orphans; when the command exits the kernel kills the rest.

  This needs ``CAP_SYS_ADMIN`` (a root worker; in a container, ``cap_add: [SYS_ADMIN]``
  and an AppArmor profile that allows ``mount``). Where the kernel refuses, the worker
  refuses to start (``Sandbox.check``, run by ``toolq worker``) and every call fails;
  nothing runs with less isolation unless you pass ``isolation="none"``, which runs the
  command in the worker's namespaces (the model before namespaces: host network, host
  ``/tmp``, every process visible).
* **Files.** The workspace is the starting directory, not a jail (no chroot): the command
  sees the host filesystem, except the private directories above, as its user does. As
  "nobody" it reads what is world-readable and writes only the private temporary
  directories, its scratch ``TMPDIR`` (made per call, inside the private ``/tmp``) and
  whatever you make writable for that user, e.g. ``chown -R 65534:65534 <root>``; toolq
  does not change ownership of your files. The workspace and its parents must be
  searchable (``o+x``) by that user.
* **Confinement** (every isolation mode): ``no_new_privs`` (a setuid bit or file capability
  raises nothing) and a seccomp filter (``toolq/builtins/seccomp.py``): no unix socket is
  made, so none of the host's (a database's, Redis', Docker's, in any directory or the
  abstract namespace) can be reached; no ``ptrace``, namespaces, mounts, ``bpf``, keyrings,
  ``io_uring`` or module loading. Only on x86_64 and aarch64: elsewhere the sandbox refuses
  to run.
* **Environment.** Only an allowlist reaches the command: ``PATH``, ``LANG``, ``HOME`` (the
  workspace), ``TMPDIR`` and what you pass in ``env``. Nothing of the worker's environment is
  inherited, so API keys and ``TOOLQ_*`` settings stay out.
* **Limits** (``SandboxLimits``): wall-clock ``timeout``, ``RLIMIT_CPU``, ``RLIMIT_AS``,
  ``RLIMIT_NPROC``, ``RLIMIT_FSIZE``, ``RLIMIT_NOFILE``, no core dumps, and a byte cap on each
  of stdout and stderr (the rest is read and dropped, and ``truncated`` is set).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from toolq.builtins import seccomp
from toolq.builtins._supervisor import PRIVATE_DIRS
from toolq.builtins.capture import STOP_GRACE, Capture, pump
from toolq.builtins.workspace import Workspace
from toolq.errors import ConfigurationError, InvalidArgumentsError, ToolExecutionError
from toolq.execution.context import ToolContext
from toolq.models import RiskLevel
from toolq.registry.tool import Tool
from toolq.registry.upstream.transports import Launch

SUPERVISOR = str(Path(__file__).with_name("_supervisor.py"))
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
CHECK_TIMEOUT = 10.0
"""Seconds the start-up check of the namespaces may take."""

Isolation = Literal["namespaces", "none"]
"""``namespaces``: own PID, mount, IPC and network namespaces; ``none``: the worker's."""


class SandboxLimits(BaseModel):
    """Resource limits and identity of sandboxed commands; the defaults suit small scripts."""

    model_config = ConfigDict(frozen=True)

    timeout: float = Field(60.0, gt=0, description="Wall-clock seconds before the tree is killed.")
    cpu_seconds: int = Field(30, ge=1, description="RLIMIT_CPU per process.")
    memory_bytes: int = Field(1 << 30, ge=1 << 20, description="RLIMIT_AS per process.")
    processes: int = Field(64, ge=1, description="RLIMIT_NPROC: processes the call may add.")
    file_size_bytes: int = Field(64 << 20, ge=0, description="RLIMIT_FSIZE: largest file.")
    open_files: int = Field(256, ge=8, description="RLIMIT_NOFILE per process.")
    output_bytes: int = Field(64 * 1024, ge=1, description="Cap on each of stdout and stderr.")
    user: int = Field(65534, ge=1, description="uid to run as when the worker is root.")
    group: int = Field(65534, ge=1, description="gid to run as when the worker is root.")
    tmp_bytes: int = Field(
        64 << 20, ge=1 << 20, description="Size of the private tmpfs (/tmp, /dev/shm, ...)."
    )


class SandboxResult(BaseModel):
    """What a sandboxed run returns to the model."""

    exit_code: int | None
    """The command's exit status; negative: killed by that signal."""
    stdout: str
    stderr: str
    truncated: bool
    timed_out: bool
    duration_ms: int


def _world_usable(path: str) -> bool:
    """True when every directory up to ``path`` is o+x and the file o+rx (no group help)."""
    real = Path(os.path.realpath(path))
    try:
        if real.stat().st_mode & 0o005 != 0o005:
            return False
        return all(parent.stat().st_mode & 0o001 for parent in real.parents)
    except OSError:
        return False


class Sandbox:
    """Runs commands in a workspace directory under ``SandboxLimits`` (see module docstring)."""

    def __init__(
        self,
        cwd: str,
        limits: SandboxLimits | None = None,
        *,
        env: Mapping[str, str] | None = None,
        network: bool = False,
        isolation: Isolation = "namespaces",
    ) -> None:
        if isolation not in ("namespaces", "none"):
            raise ConfigurationError(f"isolation must be 'namespaces' or 'none', not {isolation!r}")
        if isolation == "namespaces" and os.path.realpath(cwd) in PRIVATE_DIRS:
            raise ConfigurationError(
                f"the workspace cannot be {cwd!r} itself: the sandbox gives each call a private"
                " one; use a directory below it"
            )
        self.home = cwd
        self.limits = limits or SandboxLimits()
        self.extra_env = dict(env or {})
        self.drop_privileges = os.geteuid() == 0
        self.isolation: Isolation = isolation
        self.network = network
        self._checked = False

    def check(self) -> None:
        """Set up a call's confinement once, as a call would; ConfigurationError if refused.

        Workers run it at start, so a host that cannot isolate (namespaces) or confine (the
        seccomp filter, in every mode) is found before any call.
        """
        if self._checked:
            return
        try:
            result = self.run(
                ["(check)"], ToolContext(), cwd="/", timeout=CHECK_TIMEOUT, probe=True
            )
        except ToolExecutionError as exc:
            if not exc.details.get("isolation"):
                raise ConfigurationError(f"the sandbox cannot confine commands: {exc}") from None
            raise ConfigurationError(
                f"the sandbox cannot isolate commands on this host: {exc}. Namespaces need "
                "CAP_SYS_ADMIN: run the worker as root (in a container: cap_add SYS_ADMIN and "
                "an AppArmor profile that allows mount), or opt out explicitly with "
                "isolation='none' (commands then share the worker's network, /tmp and /proc)"
            ) from None
        if result.exit_code != 0:
            raise ConfigurationError(f"the sandbox start-up check failed: {result}")
        self._checked = True

    @functools.cached_property
    def filter(self) -> bytes:
        """The seccomp program of this machine (ConfigurationError on another architecture)."""
        return seccomp.program()

    def usable(self, path: str) -> bool:
        """Tell whether the sandboxed user can execute the program at ``path``."""
        return not self.drop_privileges or _world_usable(path)

    def environment(self, scratch: str) -> dict[str, str]:
        """The complete environment of the command: an allowlist, nothing inherited."""
        return {
            "PATH": DEFAULT_PATH,
            "LANG": "C.UTF-8",
            "HOME": self.home,
            "TMPDIR": scratch,
            **self.extra_env,
        }

    def run(
        self,
        argv: Sequence[str],
        ctx: ToolContext,
        *,
        cwd: str | None = None,
        timeout: float | None = None,
        files: Mapping[str, str] | None = None,
        probe: bool = False,
    ) -> SandboxResult:
        """Run ``argv`` (no shell) and wait for it; ``{scratch}`` in argv is the scratch dir.

        ``files`` are written into the scratch directory first (e.g. a script to run).
        """
        limit = min(timeout or self.limits.timeout, self.limits.timeout)
        with self._scratch() as (host_scratch, scratch):
            for name, text in (files or {}).items():
                target = os.path.join(host_scratch, name)
                Path(target).write_text(text, encoding="utf-8")
                os.chmod(target, 0o644)
            argv = [a.replace("{scratch}", scratch) for a in argv]
            config = self._config(cwd or self.home, scratch, host_scratch, probe)
            return self._run(argv, ctx, limit, scratch, config)

    @contextlib.contextmanager
    def launch(self, argv: Sequence[str], env: Mapping[str, str]) -> Iterator[Launch]:
        """How to start a long-lived command in this sandbox (an MCP stdio server).

        The same isolation, identity, environment allowlist (plus ``env``) and limits as
        ``run``, but no wall-clock ``timeout``: the command lives as long as whoever started
        it keeps it; its scratch directory goes when the context ends. Starting it is the
        caller's (``toolq.registry.upstream.transports.stdio``): the supervisor at the head
        of a new process group, stopped with SIGTERM to the group, as ``run`` does.
        """
        with self._scratch() as (host_scratch, scratch):
            status_r, status_w = os.pipe()
            try:
                config = self._config(self.home, scratch, host_scratch, probe=False)
                config["status_fd"] = status_w
                yield Launch(
                    self._supervised(config, argv),
                    {**self.environment(scratch), **env},
                    cwd="/",
                    pass_fds=(status_w,),
                    status=status_r,
                )
            finally:
                os.close(status_r)

    @contextlib.contextmanager
    def _scratch(self) -> Iterator[tuple[str, str]]:
        """A scratch directory: its path on the host, and as the command sees it."""
        host_scratch = tempfile.mkdtemp(prefix="toolq-sandbox-")
        # Isolated, the command sees a copy in its private /tmp, under the tmpfs budget.
        isolated = self.isolation == "namespaces"
        scratch = "/tmp/" + os.path.basename(host_scratch) if isolated else host_scratch
        try:
            if self.drop_privileges and not isolated:
                os.chown(host_scratch, self.limits.user, self.limits.group)
            yield host_scratch, scratch
        finally:
            shutil.rmtree(host_scratch, ignore_errors=True)

    @staticmethod
    def _supervised(config: dict[str, Any], argv: Sequence[str]) -> list[str]:
        """The supervisor's command line that runs ``argv`` under ``config``."""
        return [sys.executable, "-I", "-S", SUPERVISOR, json.dumps(config), *argv]

    def _config(self, cwd: str, scratch: str, host_scratch: str, probe: bool) -> dict[str, Any]:
        limits = self.limits
        return {
            "isolate": self.isolation == "namespaces",
            "network": self.network,
            "tmp_bytes": limits.tmp_bytes,
            "scratch": scratch,
            "files": host_scratch,
            "workspace": self.home,
            "probe": probe,
            "seccomp": self.filter.hex(),
            "cwd": cwd,
            "uid": limits.user if self.drop_privileges else None,
            "gid": limits.group if self.drop_privileges else None,
            "parent": os.getpid(),
            "processes": limits.processes,
            "limits": {
                "RLIMIT_CPU": limits.cpu_seconds,
                "RLIMIT_AS": limits.memory_bytes,
                "RLIMIT_FSIZE": limits.file_size_bytes,
                "RLIMIT_NOFILE": limits.open_files,
                "RLIMIT_CORE": 0,
            },
        }

    def _run(
        self, argv: list[str], ctx: ToolContext, limit: float, scratch: str, config: dict[str, Any]
    ) -> SandboxResult:
        started = time.monotonic()
        status_r, status_w = os.pipe()
        config["status_fd"] = status_w
        try:
            proc = subprocess.Popen(  # see the module docstring for why not ctx.popen
                self._supervised(config, argv),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=self.environment(scratch),
                cwd="/",
                pass_fds=(status_w,),
                start_new_session=True,
            )
        except BaseException:
            os.close(status_r)
            raise
        finally:
            os.close(status_w)
        assert proc.stdout is not None and proc.stderr is not None
        streams = [
            Capture("stdout", proc.stdout, self.limits.output_bytes, ctx),
            Capture("stderr", proc.stderr, self.limits.output_bytes, ctx),
        ]
        timed_out = pump(proc, streams, ctx, started + limit)
        with os.fdopen(status_r, "rb") as f:
            lines = [json.loads(line) for line in f.read().splitlines() if line.strip()]
        for stream in streams:
            stream.close()
        proc.stdout.close()
        proc.stderr.close()
        errors = [line for line in lines if "error" in line]
        if errors and not timed_out and not ctx.cancelled:
            hint = ""
            if errors[0].get("isolation"):
                hint = " (nothing ran; isolation='none' opts out of namespaces)"
            elif self.drop_privileges:
                hint = (
                    f" (it runs as uid {self.limits.user}: the program, the working directory"
                    " and their parent directories must be accessible to that user)"
                )
            error = errors[0]["error"]
            raise ToolExecutionError(
                f"sandbox could not start {argv[0]!r}: {error}{hint}",
                isolation=bool(errors[0].get("isolation")),
            )
        final: dict[str, Any] = next((line for line in lines if "error" not in line), {})
        code = final.get("exit", -final["signal"] if "signal" in final else None)
        return SandboxResult(
            exit_code=None if timed_out else code,
            stdout=streams[0].value(),
            stderr=streams[1].value(),
            truncated=any(s.truncated for s in streams),
            timed_out=timed_out,
            duration_ms=round((time.monotonic() - started) * 1000),
        )


Timeout = Annotated[float, Field(gt=0)]


class SandboxTool(Tool):
    """A DANGEROUS tool that runs something in the sandbox."""

    risk = RiskLevel.DANGEROUS
    tags: tuple[str, ...] = ("shell",)
    category = "shell"

    def __init__(self, workspace: Workspace, sandbox: Sandbox) -> None:
        self.workspace = workspace
        self.sandbox = sandbox
        self.timeout = sandbox.limits.timeout + 2 * STOP_GRACE + 5  # backstop over our own
        super().__init__()

    def check_runtime(self) -> None:
        """Check that this host gives the sandbox its namespaces (see ``Sandbox.check``)."""
        self.sandbox.check()

    def directory(self, cwd: str) -> str:
        """The absolute working directory for ``cwd`` (relative to the workspace)."""
        parts = self.workspace.resolve(cwd)
        path = self.workspace.absolute(parts)
        if not os.path.isdir(path):
            raise InvalidArgumentsError(f"working directory {cwd!r} is not a directory")
        return path
