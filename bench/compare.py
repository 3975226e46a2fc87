"""toolq against raw Celery, dramatiq and arq in one run: absolute figures and ratios.

    python -m bench.compare [--quick] [--sections roundtrip,approval,events,scaling]
                            [--systems celery,toolq,dramatiq,arq] [--rounds 2] [--calls 300]
                            [--batch 2000] [--concurrency 2] [--pool prefork]
                            [--approvals 100] [--events 500] [--event-interval 0.005]
                            [--sizes 10,100,1000,10000] [--processes 1,2,3,4]
                            [--arq-poll-delay 0.002] [--redis-url URL]
                            [--json PATH] [--logs DIR]

``--quick`` makes the sizes left unset small (1 round, 50 calls, 300-call batches, 20
approvals, 100 events, sizes 10,100,1000, processes 1,2). dramatiq comes with the ``bench``
extra (``pip install -e '.[bench]'``); arq gets a virtualenv of its own in ``bench/.venvs/arq``,
made on first use.

Sections (each system runs alone, with its own worker, on the same Redis database, which is
flushed between systems; workers log to ``--logs``):

roundtrip  A no-op task on each system, ``--concurrency`` worker processes each: sequential
           round-trip latency (after 20 warm-up calls), then one batch of ``--batch`` calls
           sent and collected the idiomatic way of each system (printed with the table).
approval   toolq: a gated no-op, one call at a time; from just before ``approve()`` to its
           return, to the worker's ``call.started`` timestamp, and to a reader that follows
           the run receiving ``call.started``.
events     toolq: a tool yields ``--events`` progress values, each stamped with
           ``time.time()``, paced (``--event-interval``) and back to back; a reader thread
           following the run (subscribed first) takes arrival minus production time.
scaling    raw Celery and toolq: batch wall time for each of ``--sizes`` on one worker, and
           for a ``--batch`` batch on one prefork worker with each of ``--processes`` pool
           processes.

Exit status 0 when everything asked for was measured; 1 when something was not (it says
what and why, and measures the rest).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, Union

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import redis  # noqa: E402

from bench import tables  # noqa: E402
from bench.figures import WARMUP, Figures, measure  # noqa: E402
from bench.probes import scaling  # noqa: E402
from bench.probes.roundtrip import RawCeleryWorker, ToolqWorker, environment, merge  # noqa: E402
from bench.procs import Procs, bench_redis, exit_on_signal  # noqa: E402

if TYPE_CHECKING:
    from bench.peers.dramatiq_side import DramatiqWorker

T = TypeVar("T")
WorkerSide = Union[RawCeleryWorker, ToolqWorker, "DramatiqWorker"]

SECTIONS = ("roundtrip", "approval", "events", "scaling")
SYSTEMS = ("celery", "toolq", "dramatiq", "arq")
NAMES = {"celery": "raw celery", "toolq": "toolq", "dramatiq": "dramatiq", "arq": "arq"}
FULL = {
    "rounds": 2,
    "calls": 300,
    "batch": 2000,
    "approvals": 100,
    "events": 500,
    "sizes": [10, 100, 1000, 10000],
    "processes": [1, 2, 3, 4],
}
QUICK = {
    "rounds": 1,
    "calls": 50,
    "batch": 300,
    "approvals": 20,
    "events": 100,
    "sizes": [10, 100, 1000],
    "processes": [1, 2],
}


class Run:
    """One comparison: options, worker processes, the bench database, what was measured."""

    def __init__(self, args: argparse.Namespace, client: redis.Redis, logs: Path) -> None:
        self.args = args
        self.redis = client
        self.logs = logs
        self.procs = Procs()
        self.report: dict[str, Any] = {}
        self.not_measured: dict[str, str] = {}

    def log(self, name: str) -> Path:
        """Where a worker of ``name`` writes its output."""
        return self.logs / f"{name}.log"

    def flush(self) -> None:
        """Empty the bench database (between systems, never while a worker runs)."""
        self.redis.flushdb()

    def attempt(self, what: str, measure: Callable[[], T]) -> T | None:
        """``measure()``; on failure say so, record why and go on. Flushes the database after."""
        print(f"... {what}", end="", file=sys.stderr, flush=True)
        started = time.monotonic()
        try:
            return measure()
        except Exception as exc:
            reason = f"{type(exc).__name__}: {exc}".strip()
            self.not_measured[what] = reason
            print(f"\nNOT MEASURED: {what}: {reason}", flush=True)
            return None
        finally:
            self.procs.stop_all()
            self.flush()
            print(f" ({time.monotonic() - started:.1f} s)", file=sys.stderr, flush=True)


# -- sections --------------------------------------------------------------------------------


def roundtrip_section(run: Run) -> None:
    """Round trip and batch of every selected system, then toolq / each of them.

    With several ``--rounds`` the order of the systems alternates; latencies are pooled and
    the batch is the median round's (``roundtrip.merge``).
    """
    a = run.args
    rounds: dict[str, list[Figures]] = {NAMES[s]: [] for s in a.systems}
    how: dict[str, str] = {}
    for i in range(a.rounds):
        for system in a.systems if i % 2 == 0 else reversed(a.systems):
            name = NAMES[system]
            what = f"{name} round trip + batch" + (f" (round {i + 1})" if a.rounds > 1 else "")
            got = run.attempt(what, lambda s=system: _roundtrip_of(run, s))
            if got is not None:
                rounds[name].append(got[0])
                how[name] = got[1]
    figures = {name: merge(fs) for name, fs in rounds.items() if fs}
    tables.heading(
        f"Round trip ({a.calls} sequential calls after {WARMUP} warm-up) and "
        f"{a.batch}-call batch: no-op task, {a.concurrency} worker processes each"
        + (f"; {a.rounds} rounds" if a.rounds > 1 else "")
    )
    ratios = tables.roundtrip_tables(figures)
    print()
    for name, text in how.items():
        print(f"  {name + ':':<12}{text}")
    run.report["roundtrip"] = {
        "systems": {name: f.as_dict() for name, f in figures.items()},
        "rounds": {name: [f.as_dict() for f in fs] for name, fs in rounds.items() if fs},
        "how": how,
        "toolq_over": ratios,
    }


def _roundtrip_of(run: Run, system: str) -> tuple[Figures, str]:
    a = run.args
    log = run.log(f"roundtrip-{system}")
    if system == "arq":
        from bench.peers.arq_side import run_arq

        arq = run_arq(
            run.procs,
            a.redis_url,
            processes=a.concurrency,
            calls=a.calls,
            batch=a.batch,
            poll_delay=a.arq_poll_delay,
            timeout=a.batch_timeout,
            log=log,
        )
        run.report.setdefault("versions", {}).update(arq.versions)
        how = (
            f"{a.concurrency} `arq` processes (max_jobs=10 each, poll_delay={a.arq_poll_delay:g}"
            f" s); round trip enqueue_job + job.result(poll_delay={a.arq_poll_delay:g} s); "
            f"batch {arq.figures.batch_how}"
        )
        return arq.figures, how
    side = _side(run, system, a.concurrency, log)
    with side:
        figures = measure(side, a.calls, a.batch, a.batch_timeout)
    return figures, _how(system, side.batch_how)


def _side(run: Run, system: str, processes: int, log: Path) -> WorkerSide:
    """The side of ``system`` (not started) with ``processes`` worker processes."""
    a = run.args
    if system == "celery":
        return RawCeleryWorker(run.procs, a.redis_url, pool=a.pool, concurrency=processes, log=log)
    if system == "toolq":
        return ToolqWorker(run.procs, a.redis_url, pool=a.pool, concurrency=processes, log=log)
    try:
        from bench.peers.dramatiq_side import DramatiqWorker
    except ImportError as exc:
        raise RuntimeError(f"dramatiq is not installed ({exc}); pip install -e '.[bench]'") from exc
    side = DramatiqWorker(run.procs, a.redis_url, processes=processes, log=log)
    run.report.setdefault("versions", {})["dramatiq"] = side.version
    return side


def _how(system: str, batch_how: str) -> str:
    rt = {
        "celery": "apply_async().get() (Redis result backend)",
        "toolq": 'client.call("noop", {})',
        "dramatiq": "send() + get_result(block=True) (threads at dramatiq's default; an idle "
        "consumer polls with a backoff of 5 ms doubling up to 1 s)",
    }[system]
    return f"round trip {rt}; batch {batch_how}"


def latency_sections(run: Run, sections: list[str]) -> None:
    """Approval → start and event delivery, on one toolq worker."""
    from bench.probes.latency import approval_latency, event_latency

    a = run.args

    def measure_all() -> dict[str, Any]:
        out: dict[str, Any] = {}
        with ToolqWorker(
            run.procs, a.redis_url, pool=a.pool, concurrency=a.concurrency, log=run.log("latency")
        ) as side:
            if "approval" in sections:
                out["approval"] = approval_latency(side.client, a.approvals).as_dict()
            if "events" in sections:
                out["events"] = {
                    "paced": event_latency(side.client, a.events, a.event_interval).as_dict(),
                    "burst": event_latency(side.client, a.events, 0.0).as_dict(),
                }
        return out

    got = run.attempt("toolq " + " and ".join(sections), measure_all)
    if got is None:
        return
    if "approval" in got:
        tables.approval_table(got["approval"], a.approvals)
    if "events" in got:
        tables.events_table(got["events"], a.events, a.event_interval)
    run.report.update(got)


def scaling_section(run: Run) -> None:
    """Batch time by size and by pool processes, raw Celery and toolq."""
    a = run.args
    systems = [s for s in ("celery", "toolq") if s in a.systems]
    by_size: dict[str, list[scaling.BatchPoint]] = {}
    by_procs: dict[str, list[scaling.BatchPoint]] = {}
    for system in systems:
        name = NAMES[system]

        def sizes(s: str = system) -> list[scaling.BatchPoint]:
            with _side(run, s, a.concurrency, run.log(f"scaling-sizes-{s}")) as side:
                return scaling.by_size(side, a.sizes, a.concurrency, a.batch_timeout)

        def procs(s: str = system) -> list[scaling.BatchPoint]:
            return scaling.by_processes(
                lambda k: _side(run, s, k, run.log(f"scaling-procs-{s}-{k}")),
                a.processes,
                a.batch,
                a.batch_timeout,
                between=run.flush,
            )

        got = run.attempt(f"{name} batch time by size", sizes)
        if got is not None:
            by_size[name] = got
        got = run.attempt(f"{name} batch time by pool processes", procs)
        if got is not None:
            by_procs[name] = got
    report: dict[str, Any] = {}
    if by_size:
        tables.heading(
            f"Batch wall time by batch size (one {a.pool} worker, concurrency {a.concurrency}; "
            f"batches under 1,000 calls: median of 1000/size runs, at most 20)"
        )
        ratios = tables.size_table(by_size)
        report["by_size"] = _points(by_size, ratios)
    if by_procs:
        tables.heading(
            f"Batch wall time of {a.batch} calls by pool processes (one {a.pool} worker, "
            f"--concurrency k; {os.cpu_count()} cores)"
        )
        ratios = tables.process_table(by_procs)
        report["by_processes"] = _points(by_procs, ratios)
    run.report["scaling"] = report


def _points(points: dict[str, list[scaling.BatchPoint]], ratios: dict[str, Any]) -> dict[str, Any]:
    return {"systems": {n: [p.as_dict() for p in ps] for n, ps in points.items()}, **ratios}


# -- command line ----------------------------------------------------------------------------


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def _names(allowed: tuple[str, ...]) -> Callable[[str], list[str]]:
    def parse(text: str) -> list[str]:
        names = [x.strip() for x in text.split(",") if x.strip()]
        unknown = sorted(set(names) - set(allowed))
        if unknown:
            raise argparse.ArgumentTypeError(f"unknown {unknown}; choose from {','.join(allowed)}")
        return [x for x in allowed if x in names]

    return parse


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Options; sizes left unset come from ``QUICK`` with ``--quick``, else from ``FULL``."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (about a minute)")
    parser.add_argument("--sections", type=_names(SECTIONS), default=list(SECTIONS))
    parser.add_argument("--systems", type=_names(SYSTEMS), default=list(SYSTEMS))
    parser.add_argument("--rounds", type=int, help="roundtrip section repeats, order alternating")
    parser.add_argument("--calls", type=int, help="sequential round trips (after warm-up)")
    parser.add_argument("--batch", type=int, help="calls in a batch (roundtrip and processes)")
    parser.add_argument("--approvals", type=int, help="approved calls timed")
    parser.add_argument("--events", type=int, help="progress events timed per mode")
    parser.add_argument("--event-interval", type=float, default=0.005, help="seconds")
    parser.add_argument("--sizes", type=_ints, help="batch sizes for scaling")
    parser.add_argument("--processes", type=_ints, help="pool processes for scaling")
    parser.add_argument("--concurrency", type=int, default=2, help="worker processes per system")
    parser.add_argument("--pool", choices=("prefork", "threads"), default="prefork")
    parser.add_argument("--arq-poll-delay", type=float, default=0.002, help="seconds")
    parser.add_argument("--batch-timeout", type=float, default=300.0, help="seconds")
    parser.add_argument(
        "--redis-url", help="an empty database to use (default: a private redis-server)"
    )
    parser.add_argument("--json", metavar="PATH", help="also write every figure as JSON")
    parser.add_argument("--logs", metavar="DIR", help="worker logs (default: a new temp dir)")
    args = parser.parse_args(argv)
    for key, value in (QUICK if args.quick else FULL).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if "toolq" not in args.systems:
        parser.error("--systems must include toolq: it is what the others are compared with")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, exit_on_signal)
    signal.signal(signal.SIGINT, exit_on_signal)
    with bench_redis(args.redis_url) as url:
        args.redis_url = url
        return compare(args)


def compare(args: argparse.Namespace) -> int:
    """Every section for every system, on the Redis at ``args.redis_url``."""
    logs = Path(args.logs) if args.logs else Path(tempfile.mkdtemp(prefix="toolq-compare-"))
    logs.mkdir(parents=True, exist_ok=True)
    client = redis.Redis.from_url(args.redis_url)
    client.ping()
    run = Run(args, client, logs)
    started = time.monotonic()
    try:
        run.flush()
        env = environment(args, client)
        env["cores"] = f"{env['cores']}; {args.concurrency} worker processes per system"
        env["hiredis"] = _hiredis()
        print("Environment: " + ", ".join(f"{k}={v}" for k, v in env.items()))
        print(f"Worker logs: {logs}")
        if "roundtrip" in args.sections:
            roundtrip_section(run)
        latency = [s for s in ("approval", "events") if s in args.sections]
        if latency:
            latency_sections(run, latency)
        if "scaling" in args.sections:
            scaling_section(run)
        finish(run, env, time.monotonic() - started)
    finally:
        run.procs.stop_all()
        try:
            run.flush()
        finally:
            client.close()
    return 1 if run.not_measured else 0


def _hiredis() -> str:
    """hiredis's version when redis-py parses with it, else ``"no"``."""
    try:
        import hiredis
    except ImportError:
        return "no"
    return str(getattr(hiredis, "__version__", "yes"))


def finish(run: Run, env: dict[str, Any], seconds: float) -> None:
    """Say what was not measured, and write the JSON file."""
    print()
    for what, reason in run.not_measured.items():
        print(f"NOT MEASURED: {what}: {reason}")
    print(f"Run took {seconds:.0f} s; versions: {run.report.get('versions', {})}")
    if run.args.json:
        document = {
            "command": ["python", "-m", "bench.compare", *sys.argv[1:]],
            "env": env,
            "options": {k: v for k, v in vars(run.args).items() if k not in ("json", "logs")},
            **run.report,
            "not_measured": run.not_measured,
        }
        Path(run.args.json).write_text(json.dumps(document, indent=2))


if __name__ == "__main__":
    sys.exit(main())
