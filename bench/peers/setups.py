"""The worker configurations of ``bench.speed``: each system at its defaults, then tuned.

A ``Setup`` starts one system's workers (as a context manager yielding a running ``Side``);
arq is driven from its own virtualenv (``bench.peers.arq_side``), so its setups carry only options.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from bench.procs import Procs

Tuning = Literal["default", "tuned"]


@dataclass
class Setup:
    """One system in one configuration."""

    key: str
    system: Literal["celery", "dramatiq", "arq", "toolq"]
    label: str
    tuning: Tuning
    why: str
    start: Callable[[Procs, str, Path], AbstractContextManager[Any]] | None = None
    options: dict[str, Any] = field(default_factory=dict)


def celery(pool: str, concurrency: int, wrap: list[str] | None = None) -> Callable[..., Any]:
    """Start raw Celery with ``pool`` and ``concurrency``."""

    def start(procs: Procs, url: str, log: Path) -> AbstractContextManager[Any]:
        from bench.peers.raw_celery_side import RawCeleryWorker

        return RawCeleryWorker(procs, url, pool=pool, concurrency=concurrency, log=log, wrap=wrap)

    return start


def toolq(pool: str, concurrency: int, wrap: list[str] | None = None) -> Callable[..., Any]:
    """Start one ``toolq worker`` with ``pool`` and ``concurrency``."""

    def start(procs: Procs, url: str, log: Path) -> AbstractContextManager[Any]:
        from bench.peers.toolq_side import ToolqWorker

        return ToolqWorker(procs, url, pool=pool, concurrency=concurrency, log=log, wrap=wrap)

    return start


def dramatiq(processes: int | None, threads: int | None) -> Callable[..., Any]:
    """Start dramatiq; ``None`` leaves the option to dramatiq's default."""

    def start(procs: Procs, url: str, log: Path) -> AbstractContextManager[Any]:
        from bench.peers.dramatiq_side import DramatiqWorker

        return DramatiqWorker(procs, url, processes=processes, threads=threads, log=log)

    return start


def dramatiq_defaults() -> dict[str, int]:
    """dramatiq's CLI defaults in this install (``{}`` when dramatiq is missing)."""
    try:
        from bench.peers.dramatiq_side import dramatiq_defaults as read
    except ImportError:
        return {}
    return read()


def roundtrip_setups(tuned_dramatiq_threads: int, arq_poll_delay: float) -> list[Setup]:
    """Every system at its defaults, then tuned, toolq last (no-op calls)."""
    cores = os.cpu_count() or 1
    d = dramatiq_defaults()
    dp, dt = d.get("processes", cores), d.get("threads", 8)
    return [
        Setup(
            "celery-prefork",
            "celery",
            f"raw Celery, prefork -c {cores}",
            "default",
            "Celery's default pool and concurrency (prefork, one process per core)",
            celery("prefork", cores),
        ),
        Setup(
            "celery-threads",
            "celery",
            "raw Celery, threads -c 8",
            "tuned",
            "threads pool: no IPC between consumer and pool",
            celery("threads", 8),
        ),
        Setup(
            "dramatiq-default",
            "dramatiq",
            f"dramatiq, -p {dp} -t {dt}",
            "default",
            f"no --processes/--threads: dramatiq's defaults here are {dp} processes x {dt} threads",
            dramatiq(None, None),
        ),
        Setup(
            "dramatiq-tuned",
            "dramatiq",
            f"dramatiq, -p {dp} -t {tuned_dramatiq_threads}",
            "tuned",
            "more threads per process: the best of -t 1, 2, 8, 16 and -p 4 -t 8 in a probe "
            "of 2,000-call batches on this machine",
            dramatiq(dp, tuned_dramatiq_threads),
        ),
        Setup(
            "arq-default",
            "arq",
            f"arq, {cores} procs, poll 0.5 s",
            "default",
            "arq's defaults: max_jobs=10, poll_delay=0.5 s (worker) and 0.5 s (Job.result)",
            options={"poll_delay": 0.5, "processes": cores},
        ),
        Setup(
            "arq-tuned",
            "arq",
            f"arq, {cores} procs, poll {arq_poll_delay:g} s",
            "tuned",
            f"poll_delay={arq_poll_delay:g} s on both sides",
            options={"poll_delay": arq_poll_delay, "processes": cores},
        ),
        Setup(
            "toolq-prefork",
            "toolq",
            f"toolq, prefork -c {cores}",
            "default",
            "toolq worker defaults (prefork, one process per core)",
            toolq("prefork", cores),
        ),
        Setup(
            "toolq-threads",
            "toolq",
            "toolq, threads -c 8",
            "tuned",
            "threads pool",
            toolq("threads", 8),
        ),
    ]


SLOTS = 50
"""Execution slots of every system in the I/O-bound case."""


def io_setups() -> list[Setup]:
    """50 execution slots per system, for 1,000 calls that each sleep."""
    return [
        Setup(
            "io-dramatiq",
            "dramatiq",
            "dramatiq, -p 2 -t 25",
            "tuned",
            "2 processes x 25 threads = 50 slots",
            dramatiq(2, 25),
        ),
        Setup(
            "io-celery",
            "celery",
            "raw Celery, threads -c 50",
            "tuned",
            "50 threads",
            celery("threads", SLOTS),
        ),
        Setup(
            "io-toolq",
            "toolq",
            "toolq, threads -c 50",
            "tuned",
            "50 threads",
            toolq("threads", SLOTS),
        ),
    ]
