"""Worker subprocesses of the benchmarks: started in their own process group, always stopped."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
READY_TIMEOUT = 60.0
"""Seconds a worker may take to come up."""


class Procs:
    """Worker subprocesses, each in its own session/process group."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(
        self, argv: list[str], env: dict[str, str], log: Path | None = None
    ) -> subprocess.Popen[bytes]:
        """Start ``argv`` from the repository root; its output goes to ``log`` when given.

        Without ``log``, stdout (only the Celery banner) is dropped and stderr is inherited.
        """
        if log is None:
            proc = subprocess.Popen(
                argv, env=env, cwd=ROOT, start_new_session=True, stdout=subprocess.DEVNULL
            )
        else:
            with log.open("ab") as out:
                proc = subprocess.Popen(
                    argv,
                    env=env,
                    cwd=ROOT,
                    start_new_session=True,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
        self.procs.append(proc)
        return proc

    def stop(self, proc: subprocess.Popen[bytes], grace: float = 15.0) -> None:
        """SIGTERM (Celery's warm shutdown), then SIGKILL the whole group after ``grace``.

        SIGTERM goes to the worker's main process only: it stops its own pool children,
        where a group-wide SIGTERM would make them die under it as "lost" workers.
        The group was created with the worker (``start_new_session``), so its id is the pid.
        """
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace)
        # Anything left in the group (a stuck main process, orphaned prefork children).
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
        if proc in self.procs:
            self.procs.remove(proc)

    def stop_all(self) -> None:
        """Stop every worker still running."""
        for proc in list(self.procs):
            self.stop(proc)


def exit_on_signal(signum: int, frame: Any) -> None:
    """First SIGTERM/SIGINT ends the run; later ones are ignored so the cleanup finishes."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise SystemExit(128 + signum)


def worker_env(redis_url: str) -> dict[str, str]:
    """This environment plus the repository on ``PYTHONPATH`` and the Redis URL for the apps."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env["BENCH_REDIS_URL"] = redis_url
    env["TOOLQ_REDIS_URL"] = redis_url
    return env


def wait_for_keys(
    redis_url: str,
    prefix: str,
    count: int,
    procs: list[subprocess.Popen[bytes]],
    timeout: float,
) -> None:
    """Block until ``count`` keys start with ``prefix`` (one per ready worker process).

    Raises ``RuntimeError`` when one of ``procs`` exits first or ``timeout`` runs out.
    """
    import redis

    client = redis.Redis.from_url(redis_url)
    deadline = time.monotonic() + timeout
    try:
        while len(list(client.scan_iter(match=f"{prefix}*", count=1000))) < count:
            for proc in procs:
                if proc.poll() is not None:
                    raise RuntimeError(f"worker {proc.args!r} exited with {proc.returncode}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"fewer than {count} worker processes ready after {timeout:g}s")
            time.sleep(0.1)
    finally:
        client.close()


def tail(log: Path | None, lines: int = 12) -> str:
    """The last ``lines`` lines of a worker's log (empty without one)."""
    if log is None or not log.exists():
        return ""
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


@contextlib.contextmanager
def bench_redis(url: str | None) -> Any:
    """The Redis a benchmark uses: a private ``redis-server`` when ``url`` is None.

    A benchmark flushes its database between systems, so an explicit ``url`` must name an
    empty database: one holding keys the benchmark did not write is refused.
    """
    import redis

    from toolq.cli.stack import EmbeddedRedis

    if url is not None:
        client = redis.Redis.from_url(url)
        try:
            if client.dbsize():
                raise SystemExit(
                    f"{url} holds keys this benchmark did not write and would flush; "
                    "name an empty database, or omit --redis-url for a private server"
                )
        finally:
            client.close()
        yield url
        return
    server = EmbeddedRedis()
    server.start()
    try:
        yield server.url
    finally:
        server.stop()
