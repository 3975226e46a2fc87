"""arq in the comparison: its own virtualenv, N ``arq`` worker processes, a client subprocess.

arq pins ``redis<6`` and toolq needs ``redis>=6.1``, so arq never enters toolq's environment:
``ensure_venv`` makes ``bench/.venvs/arq`` (``python -m venv`` + ``pip install 'arq>=0.26'``) on
first use. Both the workers (``arq bench.peers.arq_app.WorkerSettings``) and the client
(``python -m bench.peers.arq_client``, which prints JSON) run from that venv.

Concurrency: ``processes`` separate worker processes (arq has no process pool of its own),
each an asyncio loop with arq's default ``max_jobs=10``. Both the workers' queue polls and the
client's result polls wait ``poll_delay`` seconds (arq's defaults: 0.5 s each).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.figures import WARMUP, Figures
from bench.peers.arq_app import READY_PREFIX
from bench.procs import READY_TIMEOUT, ROOT, Procs, tail, wait_for_keys, worker_env

VENV = ROOT / "bench" / ".venvs" / "arq"
REQUIREMENT = "arq>=0.26"
BATCH_HOW = "enqueue_job x M, then job.result(poll_delay) for each"


class Unavailable(RuntimeError):
    """arq could not be installed or started; the message says why."""


@dataclass
class ArqRun:
    """What one arq run measured, and with which versions and poll delay."""

    figures: Figures
    versions: dict[str, str] = field(default_factory=dict)
    poll_delay_s: float = 0.0


def ensure_venv(venv: Path = VENV) -> Path:
    """arq's virtualenv, created and installed on first use; returns its ``bin`` directory."""
    bin_dir = venv / "bin"
    stamp = venv / "bench-requirement.txt"
    if stamp.exists() and stamp.read_text() == REQUIREMENT and (bin_dir / "arq").exists():
        return bin_dir
    steps = [
        [sys.executable, "-m", "venv", "--clear", str(venv)],
        [str(bin_dir / "python"), "-m", "pip", "install", "-q", REQUIREMENT],
    ]
    for argv in steps:
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise Unavailable(f"cannot create arq's venv: {' '.join(argv)}: {exc}") from exc
        if done.returncode:
            lines = done.stderr.strip().splitlines()
            errors = [line for line in lines if line.startswith("ERROR")] or lines[-5:]
            raise Unavailable(
                f"cannot create arq's venv: {' '.join(argv)} failed:\n" + "\n".join(errors)
            )
    stamp.write_text(REQUIREMENT)
    return bin_dir


@contextlib.contextmanager
def arq_workers(
    procs: Procs, redis_url: str, *, processes: int, poll_delay: float, log: Path | None = None
) -> Iterator[tuple[Path, dict[str, str]]]:
    """``processes`` ready arq workers; yields arq's ``bin`` directory and the client's env."""
    bin_dir = ensure_venv()
    env = {**worker_env(redis_url), "BENCH_ARQ_POLL_DELAY": repr(poll_delay)}
    worker = [
        str(bin_dir / "arq"),
        "bench.peers.arq_app.WorkerSettings",
        "--custom-log-dict",
        "bench.peers.arq_app.LOG_CONFIG",
    ]
    workers = [procs.start(worker, env, log) for _ in range(processes)]
    try:
        try:
            wait_for_keys(redis_url, READY_PREFIX, processes, workers, READY_TIMEOUT)
        except RuntimeError as exc:
            raise Unavailable(f"arq workers did not start: {exc}\n{tail(log)}") from exc
        yield bin_dir, env
    finally:
        for proc in workers:
            procs.stop(proc)


def run_arq(
    procs: Procs,
    redis_url: str,
    *,
    processes: int,
    calls: int,
    batch: int,
    poll_delay: float,
    timeout: float,
    log: Path | None = None,
) -> ArqRun:
    """Start ``processes`` arq workers, run the client once, stop the workers."""
    with arq_workers(procs, redis_url, processes=processes, poll_delay=poll_delay, log=log) as (
        bin_dir,
        env,
    ):
        data = arq_client(bin_dir, env, redis_url, calls, batch, poll_delay, timeout)
    return ArqRun(figures_of(data), versions_of(data), poll_delay)


def figures_of(data: dict[str, Any]) -> Figures:
    """The ``Figures`` of one client run's JSON."""
    return Figures(
        "arq",
        latencies_ms=data["latencies_ms"],
        batch_size=data["batch"],
        batch_send_s=data["batch_send_s"],
        batch_total_s=data["batch_total_s"],
        batch_how=BATCH_HOW,
    )


def versions_of(data: dict[str, Any]) -> dict[str, str]:
    """arq's and its redis-py's versions, from one client run's JSON."""
    return {"arq": data["arq"], "arq redis-py": data["redis-py"]}


def arq_client(
    bin_dir: Path,
    env: dict[str, str],
    redis_url: str,
    calls: int,
    batch: int,
    poll_delay: float,
    timeout: float,
    warmup: int = WARMUP,
) -> dict[str, Any]:
    """Run ``bench.peers.arq_client`` in arq's venv; its JSON figures."""
    argv = [
        str(bin_dir / "python"),
        "-m",
        "bench.peers.arq_client",
        "--redis-url",
        redis_url,
        "--calls",
        str(calls),
        "--batch",
        str(batch),
        "--warmup",
        str(warmup),
        "--poll-delay",
        repr(poll_delay),
        "--timeout",
        repr(timeout),
    ]
    limit = timeout + 60 + calls * 1.0
    done = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=limit)
    if done.returncode:
        last = "\n".join(done.stderr.strip().splitlines()[-8:])
        raise RuntimeError(f"arq client exited with {done.returncode}:\n{last}")
    data: dict[str, Any] = json.loads(done.stdout)
    return data
