"""Worker processes and the faults injected into them, into Redis and into pub/sub.

Each worker is ``python -m toolq worker`` in its own process group, so ``kill -9`` takes
the main process and its whole pool at once. Every fault and every worker start goes to
the history with its wall-clock time; the checker relates executions to them.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from bench.chaos.history import EXECUTIONS, History, error_reason, read_jsonl
from bench.chaos.load import RACING_KEY
from bench.chaos.postgres import PrivatePostgres
from bench.chaos.server import PrivateRedis
from toolq.keys import HISTORY_GROUP, Keys
from toolq.models import RiskLevel

ROOT = Path(__file__).resolve().parents[2]
FAULT_KINDS = (
    "kill9",
    "sigterm",
    "redis-restart",
    "redis-kill-burst",
    "pubsub-kill",
    "racing-approvers",
)
HISTORY_FAULT_KINDS = ("archiver-kill9", "sql-restart")
"""Faults of the history store's path (``--history``): see ``FaultInjector.inject``."""
ALL_FAULT_KINDS = FAULT_KINDS + HISTORY_FAULT_KINDS
BURST_WAIT = 3.0
"""Seconds ``redis-kill-burst`` waits for a burst of pushes before it kills Redis anyway."""


@dataclass(frozen=True)
class WorkerSpec:
    """One worker's queues, pool, concurrency and prefetch (``None``: toolq's default)."""

    name: str
    risk: str
    pool: str
    concurrency: int
    prefetch: int | None = None


SPECS = (
    WorkerSpec("w0", "safe,moderate", "prefork", 2),  # default prefetch: 4
    WorkerSpec("w1", "safe,moderate,dangerous", "threads", 3),  # default with dangerous: 1
    WorkerSpec("w2", "moderate,dangerous", "prefork", 2, prefetch=1),
    WorkerSpec("w3", "safe", "threads", 2, prefetch=1),
    WorkerSpec("w4", "safe,moderate", "threads", 3),
    WorkerSpec("w5", "dangerous,safe", "solo", 1, prefetch=1),
)


def worker_specs(count: int) -> list[WorkerSpec]:
    """The first ``count`` specs, cycling with fresh names past the table."""
    out = []
    for i in range(count):
        base = SPECS[i % len(SPECS)]
        out.append(WorkerSpec(f"w{i}", base.risk, base.pool, base.concurrency, base.prefetch))
    return out


class WorkerPool:
    """Starts, kills and restarts the worker processes."""

    def __init__(
        self, specs: list[WorkerSpec], redis_url: str, out_dir: Path, env: dict[str, str]
    ) -> None:
        self.specs = {s.name: s for s in specs}
        self.redis_url = redis_url
        self.out_dir = out_dir
        self.env = env
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.history = History(out_dir, "harness")
        self.lock = threading.Lock()
        self.shutting_down: set[str] = set()
        """Workers in a warm shutdown: ``check_alive`` leaves them to their restarter."""
        self.archivers: dict[str, subprocess.Popen[bytes]] = {}
        """Standalone ``toolq history archive`` processes, by name."""
        (out_dir / "workers").mkdir(exist_ok=True)

    def _environ(self) -> dict[str, str]:
        return {
            **os.environ,
            **self.env,
            "TOOLQ_REDIS_URL": self.redis_url,
            "TOOLQ_APP": "bench.chaos.app:registry",
            "CHAOS_EXEC_LOG": str(self.out_dir / EXECUTIONS),
            "PYTHONPATH": str(ROOT),
        }

    def start_archiver(self, name: str) -> subprocess.Popen[bytes]:
        """Start (or restart) a standalone archiver (``toolq history archive``)."""
        argv = [sys.executable, "-m", "toolq", "history", "archive"]
        with open(self.out_dir / "workers" / f"{name}.log", "ab") as log:
            proc = subprocess.Popen(
                argv,
                env=self._environ(),
                cwd=ROOT,
                start_new_session=True,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        with self.lock:
            self.archivers[name] = proc
        self.history.append("archiver_start", worker=name, pgid=proc.pid)
        return proc

    def restart(self, name: str) -> None:
        """Start a worker or a standalone archiver again, by name."""
        if name in self.archivers:
            self.start_archiver(name)
        else:
            self.start(name)

    def kill9_group(self, name: str, kind: str, **fields: object) -> int:
        """SIGKILL the process group of a worker or a standalone archiver; the group id."""
        with self.lock:
            proc = self.archivers.get(name) or self.procs[name]
        t = time.time()
        _killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
        self.history.append("fault", kind=kind, worker=name, pgid=proc.pid, time=t, **fields)
        return proc.pid

    def by_pid(self) -> dict[int, str]:
        """Name of each running worker (main process) and standalone archiver, by pid."""
        with self.lock:
            out = {p.pid: n for n, p in self.procs.items() if n not in self.shutting_down}
            out.update({p.pid: n for n, p in self.archivers.items()})
        return out

    def start(self, name: str) -> subprocess.Popen[bytes]:
        """Start (or restart) one worker."""
        spec = self.specs[name]
        environ = self._environ()
        argv = [
            sys.executable, "-m", "toolq", "worker",
            "--risk", spec.risk,
            "--pool", spec.pool,
            "--concurrency", str(spec.concurrency),
            "--loglevel", "warning",
            *(["--prefetch", str(spec.prefetch)] if spec.prefetch else []),
        ]  # fmt: skip
        with open(self.out_dir / "workers" / f"{name}.log", "ab") as log:
            proc = subprocess.Popen(
                argv,
                env=environ,
                cwd=ROOT,
                start_new_session=True,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        with self.lock:
            self.procs[name] = proc
            self.shutting_down.discard(name)
        self.history.append(
            "worker_start",
            worker=name,
            pgid=proc.pid,
            risk=spec.risk,
            pool=spec.pool,
            concurrency=spec.concurrency,
            prefetch=spec.prefetch,
        )
        return proc

    def start_all(self) -> None:
        """Start every worker."""
        for name in self.specs:
            self.start(name)

    def running(self) -> list[str]:
        """Names of workers not in a warm shutdown."""
        with self.lock:
            return sorted(n for n in self.procs if n not in self.shutting_down)

    def kill9(self, name: str) -> int:
        """SIGKILL a worker's whole process group; returns the group id."""
        proc = self.procs[name]
        t = time.time()
        _killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
        self.history.append("fault", kind="kill9", worker=name, pgid=proc.pid, time=t)
        return proc.pid

    def sigterm(self, name: str, grace: float = 30.0) -> None:
        """SIGTERM the main process (warm shutdown), wait, and clean up what is left."""
        with self.lock:
            proc = self.procs[name]
            self.shutting_down.add(name)
        t = time.time()
        proc.send_signal(signal.SIGTERM)
        self.history.append("fault", kind="sigterm", worker=name, pgid=proc.pid, time=t)
        try:
            proc.wait(grace)
            self.history.append(
                "worker_exit",
                worker=name,
                pgid=proc.pid,
                code=proc.returncode,
                after=time.time() - t,
            )
        except subprocess.TimeoutExpired:
            self.history.append("fault", kind="sigterm-escalated", worker=name, pgid=proc.pid)
            proc.kill()
            proc.wait(10)
        # A pool child that outlived its parent would still run calls: it dies here, and
        # the kill is a fault the checker knows about (an unfinished execution ends now).
        if _killpg(proc.pid, signal.SIGKILL):
            self.history.append("fault", kind="group-cleanup", worker=name, pgid=proc.pid)

    def check_alive(self) -> None:
        """Restart workers that died on their own (recorded as ``worker_died``)."""
        with self.lock:
            dead = [
                (n, p)
                for n, p in self.procs.items()
                if n not in self.shutting_down and p.poll() is not None
            ]
            dead += [(n, p) for n, p in self.archivers.items() if p.poll() is not None]
        for name, proc in dead:
            self.history.append(
                "worker_died",
                worker=name,
                pgid=proc.pid,
                code=proc.returncode,
                reason=self.exit_reason(name),
            )
            _killpg(proc.pid, signal.SIGKILL)
            self.restart(name)

    def exit_reason(self, name: str) -> str:
        """The one-line reason ``toolq worker`` printed when it exited, if any."""
        path = self.out_dir / "workers" / f"{name}.log"
        with open(path, "rb") as log:
            log.seek(max(0, path.stat().st_size - 20_000))
            tail = log.read().decode(errors="replace").splitlines()
        return next((ln for ln in reversed(tail) if ln.startswith("toolq worker: exiting")), "")

    def stop_all(self) -> None:
        """Warm-stop every worker and archiver, killing what does not stop in time."""
        procs = [*self.procs.values(), *self.archivers.values()]
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(20)
            _killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def _consumer_pid(name: str) -> int:
    """The pid in an archiver's consumer name (0 when there is none)."""
    head = name.partition("@")[0]
    digits = head.rsplit("-", 1)[-1] if "@" in name else name.rsplit(":", 1)[-1]
    return int(digits) if digits.isdigit() else 0


def _killpg(pgid: int, sig: signal.Signals) -> bool:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    return True


class FaultInjector(threading.Thread):
    """Injects one fault every ``interval`` seconds, cycling through the kinds in a seeded order."""

    def __init__(
        self,
        pool: WorkerPool,
        server: PrivateRedis,
        kinds: list[str],
        *,
        interval: float,
        duration: float,
        seed: int,
        redis_outage: float = 1.0,
        racing_window: float | None = None,
        sql: PrivatePostgres | None = None,
        sql_outage: float = 2.0,
    ) -> None:
        super().__init__(name="chaos-faults", daemon=True)
        self.pool = pool
        self.server = server
        self.rng = random.Random(f"{seed}-faults")
        self.kinds = list(kinds)
        self.rng.shuffle(self.kinds)
        self.interval = interval
        self.duration = duration
        self.redis_outage = redis_outage
        self.racing_window = racing_window or interval
        self.sql = sql
        self.sql_outage = sql_outage
        self.history = History(pool.out_dir, "faults")
        self.stopped = threading.Event()
        self.restarts: list[threading.Thread] = []

    def run(self) -> None:
        """Inject faults until the duration is over; restart workers that died meanwhile."""
        start = time.monotonic()
        n = 0
        next_at = start + self.interval
        while not self.stopped.is_set() and time.monotonic() < start + self.duration:
            if time.monotonic() >= next_at and self.kinds:
                self.inject(self.kinds[n % len(self.kinds)])
                n += 1
                next_at += self.interval
            self.pool.check_alive()
            self.stopped.wait(0.2)
        for thread in self.restarts:
            thread.join()

    def _wait_for_burst(self) -> tuple[int, float]:
        """Block until call messages are being pushed; ``(pushes seen, seconds waited)``.

        Polls toolq's per-queue push counters every millisecond, so the kill that follows
        lands while workers are taking those messages: between kombu's ``BRPOP`` and its
        ``unacked`` record, on purpose. A seeded jitter of a few milliseconds spreads the
        kills over that window.
        """
        keys = Keys()
        counters = [keys.queue_pushes(keys.queue_for(level)) for level in RiskLevel]
        conn = redis.Redis.from_url(self.server.url, socket_timeout=2)
        start = time.monotonic()
        try:
            base = sum(int(v or 0) for v in conn.mget(counters))
            while time.monotonic() - start < BURST_WAIT:
                seen = sum(int(v or 0) for v in conn.mget(counters)) - base
                if seen > 0:
                    time.sleep(self.rng.uniform(0, 0.004))
                    return seen, time.monotonic() - start
                time.sleep(0.001)
        except redis.RedisError:
            pass
        finally:
            conn.close()
        return 0, time.monotonic() - start

    def _busy_victim(self) -> str:
        """A worker that is running a call right now, if any (the interesting kill -9)."""
        open_execs: dict[str, int] = {}
        for entry in read_jsonl(self.pool.out_dir / EXECUTIONS):
            if entry["ev"] == "start":
                open_execs[entry["exec"]] = entry["pgid"]
            else:
                open_execs.pop(entry["exec"], None)
        busy = set(open_execs.values())
        names = self.pool.running()
        with self.pool.lock:
            candidates = [n for n in names if self.pool.procs[n].pid in busy]
        return self.rng.choice(candidates or names)

    def _archiving_victim(self) -> tuple[str | None, int, float]:
        """A process whose archiver holds a batch read but not yet acknowledged (mid-batch).

        Polls the archive group's pending entries per consumer every millisecond for up to
        ``BURST_WAIT`` seconds; a consumer's name ends with its main process's pid
        (``toolq-...-PID@host`` for a worker, ``host:PID`` for ``toolq history archive``).
        Entries left by an archiver killed before are skipped (their pid is gone).
        ``(name or None, entries pending, seconds waited)``.
        """
        keys = Keys()
        conn = redis.Redis.from_url(self.server.url, socket_timeout=2)
        start = time.monotonic()
        try:
            while time.monotonic() - start < BURST_WAIT:
                live = self.pool.by_pid()
                summary: Any = conn.xpending(keys.history_archive, HISTORY_GROUP)
                for consumer in summary.get("consumers") or []:
                    pid = _consumer_pid(str(consumer["name"]))
                    if pid in live and int(consumer["pending"]) > 0:
                        return live[pid], int(consumer["pending"]), time.monotonic() - start
                time.sleep(0.001)
        except redis.RedisError:
            pass
        finally:
            conn.close()
        return None, 0, time.monotonic() - start

    def inject(self, kind: str) -> None:
        """Inject one fault of ``kind``."""
        if kind == "archiver-kill9":
            name, pending, waited = self._archiving_victim()
            if name is None:  # no batch caught in flight: any archiving process
                name = self.rng.choice(self.pool.running() + sorted(self.pool.archivers))
            self.pool.kill9_group(
                name, kind, mid_batch=pending > 0, pending=pending, waited=round(waited, 3)
            )
            time.sleep(0.5)
            self.pool.restart(name)
        elif kind == "sql-restart":
            t = time.time()
            if self.sql is None:
                self.history.append("fault", kind=kind, time=t, skipped="no PostgreSQL")
                return
            self.sql.stop()
            time.sleep(self.sql_outage)
            self.sql.start()
            self.history.append("fault", kind=kind, time=t, up=time.time())
        elif kind == "kill9":
            name = self._busy_victim()
            self.pool.kill9(name)
            time.sleep(0.5)
            self.pool.start(name)
        elif kind == "sigterm":
            name = self.rng.choice(self.pool.running())

            def warm_restart() -> None:
                self.pool.sigterm(name)
                self.pool.start(name)

            with self.pool.lock:  # claimed now, so kill9 and check_alive leave it alone
                self.pool.shutting_down.add(name)
            thread = threading.Thread(target=warm_restart, daemon=True)
            thread.start()
            self.restarts.append(thread)
        elif kind == "redis-restart":
            down = time.time()
            self.server.kill9()
            time.sleep(self.redis_outage)
            self.server.start()
            self.history.append("fault", kind="redis-restart", time=down, up=time.time())
        elif kind == "redis-kill-burst":
            burst, waited = self._wait_for_burst()
            down = time.time()
            self.server.kill9()
            time.sleep(self.redis_outage)
            self.server.start()
            self.history.append(
                "fault", kind=kind, time=down, up=time.time(), burst=burst, waited=round(waited, 3)
            )
        elif kind == "pubsub-kill":
            t = time.time()
            try:
                conn = redis.Redis.from_url(self.server.url, socket_timeout=5)
                killed = int(conn.execute_command("CLIENT", "KILL", "TYPE", "pubsub"))
                # Event readers block in XREAD on the run's stream (there is no pub/sub
                # wake-up to kill): drop the connections blocked there too.
                for client in conn.client_list():
                    if client.get("cmd") == "xread" and "b" in client.get("flags", ""):
                        with contextlib.suppress(redis.RedisError):
                            killed += int(conn.client_kill_filter(_id=client["id"]))
                conn.close()
                self.history.append("fault", kind="pubsub-kill", time=t, killed=killed)
            except redis.RedisError as exc:
                self.history.append(
                    "fault", kind="pubsub-kill", time=t, killed=0, error=error_reason(exc)
                )
        elif kind == "racing-approvers":
            t = time.time()
            try:
                conn = redis.Redis.from_url(self.server.url, socket_timeout=5)
                conn.set(RACING_KEY, repr(t + self.racing_window))
                conn.close()
                self.history.append(
                    "fault", kind="racing-approvers", time=t, until=t + self.racing_window
                )
            except redis.RedisError as exc:
                self.history.append(
                    "fault", kind="racing-approvers", time=t, error=error_reason(exc)
                )
        else:
            raise ValueError(f"unknown fault {kind!r}")
