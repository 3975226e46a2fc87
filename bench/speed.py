"""The speed benchmark: toolq against raw Celery, dramatiq and arq on one private Redis.

    python -m bench.speed [--calls 300] [--batch 2000] [--repeat 3] [--io-calls 1000]
                          [--io-sleep 0.1]
                          [--sections roundtrip,io,async,scaling,breakdown,profile,cells,fairshare]
                          [--systems celery,dramatiq,arq,toolq] [--scaling 1,2,4]
                          [--dramatiq-tuned-threads 16] [--arq-poll-delay 0.002]
                          [--async-processes 2] [--async-threads 50] [--breakdown-calls 20]
                          [--breakdown-idle 10] [--fairshare-calls N] [--tiny]
                          [--json PATH] [--logs DIR]

Every system runs alone (one at a time) on the same private ``redis-server`` (Redis 7 when
``/usr/bin/redis-server`` exists; never the system instance), each at its own defaults first,
then tuned (``bench/peers/setups.py`` says which and why). For each: p50/p99 of ``--calls``
sequential no-op round trips (after 20 warm-up), then ``--repeat`` batches of ``--batch`` no-op
calls (the median batch counts);
Redis CPU (``used_cpu_user+used_cpu_sys``) and commands (``INFO commandstats``, which counts
the commands Lua scripts issue: checked and printed) per call over each phase; Redis memory
per finished call and its keys for toolq. Then the I/O-bound case, async tools, scaling with
pinned cores, where toolq's Redis commands go (MONITOR) and where its worker CPU goes
(py-spy). Prints one table with ratios and every speed target as PASS/MISS.

Exit status 0 when everything asked for was measured, 1 when something was not.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import redis  # noqa: E402

from bench import speed_report  # noqa: E402
from bench.compare import Run, _hiredis  # noqa: E402
from bench.figures import WARMUP, percentile, sequential  # noqa: E402
from bench.peers.setups import SLOTS, Setup, dramatiq_defaults, io_setups, roundtrip_setups  # noqa: E402
from bench.probes.redis_cost import (  # noqa: E402
    machine_busy,
    measured,
    own_cpu_s,
    private_redis,
    scripts_counted,
    tree_cpu_s,
)
from bench.procs import exit_on_signal  # noqa: E402

SECTIONS = (
    "roundtrip",
    "io",
    "async",
    "scaling",
    "breakdown",
    "profile",
    "cells",
    "fairshare",
)
SYSTEMS = ("celery", "dramatiq", "arq", "toolq")


# -- round trip + batch ----------------------------------------------------------------------


def roundtrip(run: Run, setup: Setup) -> dict[str, Any]:
    """p50/p99 of sequential calls, then a batch; Redis cost of each phase."""
    a = run.args
    assert setup.start is not None
    with setup.start(run.procs, a.redis_url, run.log(setup.key)) as side:
        sequential(side.round_trip, 0)  # warm-up
        with measured(run.redis) as single:
            latencies = sequential(side.round_trip, a.calls, warmup=0)
        workers0, client0 = tree_cpu_s(side.proc.pid), own_cpu_s()
        with measured(run.redis) as batch:
            times = [side.batch(a.batch, a.batch_timeout) for _ in range(a.repeat)]
        workers_s, client_s = tree_cpu_s(side.proc.pid) - workers0, own_cpu_s() - client0
        keys: dict[str, Any] = {}
        if setup.system == "toolq":
            from bench.probes.memory import call_hash, key_kinds, run_keys
            from toolq.keys import Keys

            keys = {
                "kinds": key_kinds(run.redis),
                "batch_run": run_keys(run.redis, side.last_run_id),
            }
            k = Keys(side.settings.key_prefix)
            last: Any = run.redis.lindex(k.run_calls(side.last_run_id), -1)
            if last:
                keys["sample_call"] = call_hash(run.redis, k.call(last.decode()))
    return _row(setup, latencies, a.batch, times, single[0], batch[0],
                workers_s, client_s, keys)  # fmt: skip


def arq_roundtrip(run: Run, setup: Setup) -> dict[str, Any]:
    """arq: its client (own venv) once for the round trips, once for the batch."""
    from bench.peers.arq_side import arq_client, arq_workers, versions_of

    a = run.args
    poll, procs = setup.options["poll_delay"], setup.options["processes"]
    calls = a.calls if poll < 0.1 else min(a.calls, a.arq_slow_calls)
    with arq_workers(
        run.procs, a.redis_url, processes=procs, poll_delay=poll, log=run.log(setup.key)
    ) as (bin_dir, env):
        arq_client(bin_dir, env, a.redis_url, 0, 0, poll, a.batch_timeout, warmup=WARMUP)
        with measured(run.redis) as single:
            seq = arq_client(bin_dir, env, a.redis_url, calls, 0, poll, a.batch_timeout, 0)
        with measured(run.redis) as batch:
            runs = [
                arq_client(bin_dir, env, a.redis_url, 0, a.batch, poll, a.batch_timeout, 0)
                for _ in range(a.repeat)
            ]
    run.report.setdefault("versions", {}).update(versions_of(runs[0]))
    times = [(r["batch_send_s"], r["batch_total_s"]) for r in runs]
    return _row(setup, seq["latencies_ms"], a.batch, times, single[0], batch[0], None, None,
                {})  # fmt: skip


def _row(
    setup: Setup,
    latencies: list[float],
    batch: int,
    times: list[tuple[float, float]],
    single: Any,
    batched: Any,
    workers_cpu_s: float | None,
    client_cpu_s: float | None,
    keys: dict[str, Any],
) -> dict[str, Any]:
    row = {
        "key": setup.key,
        "system": setup.system,
        "label": setup.label,
        "tuning": setup.tuning,
        "why": setup.why,
        "calls": len(latencies),
        "p50_ms": percentile(latencies, 50),
        "p99_ms": percentile(latencies, 99),
        "batch": batch,
        "batches": len(times),
        # The median batch: the host is shared, one batch can land on a busy moment.
        "batch_send_s": statistics.median(t[0] for t in times),
        "batch_total_s": statistics.median(t[1] for t in times),
        "batch_calls_per_s": statistics.median(batch / t[1] for t in times),
        "batch_calls_per_s_each": [batch / t[1] for t in times],
        "single": single.per_call(len(latencies)),
        "batched": batched.per_call(batch * len(times)),
    }
    if workers_cpu_s is not None and client_cpu_s is not None:
        row["workers_cpu_us_per_call"] = workers_cpu_s * 1e6 / (batch * len(times))
        row["client_cpu_us_per_call"] = client_cpu_s * 1e6 / (batch * len(times))
    if keys:
        row["keys"] = keys
    return row


# -- I/O-bound, async, scaling ---------------------------------------------------------------


def io_bound(run: Run, setup: Setup) -> dict[str, Any]:
    """``--io-calls`` calls that each sleep ``--io-sleep`` on 50 slots."""
    from bench.probes.io_bound import naps

    a = run.args
    assert setup.start is not None
    with setup.start(run.procs, a.redis_url, run.log(setup.key)) as side:
        sequential(side.round_trip, 0)
        with measured(run.redis) as cost:
            seconds = naps(setup.system, side, a.io_calls, a.io_sleep, a.batch_timeout)
    ideal = a.io_calls * a.io_sleep / SLOTS
    return {"key": setup.key, "system": setup.system, "label": setup.label, "slots": SLOTS,
            "calls": a.io_calls, "sleep_s": a.io_sleep, "seconds": seconds, "ideal_s": ideal,
            "over_ideal": seconds / ideal, "redis": cost[0].per_call(a.io_calls)}  # fmt: skip


def async_tools(run: Run) -> dict[str, Any]:
    """``--io-calls`` ``async def`` tools on ``--async-processes`` toolq worker processes."""
    from contextlib import ExitStack

    from bench.peers.toolq_side import ToolqWorker
    from bench.probes.io_bound import toolq_naps
    from toolq.cli.check import live_workers

    a = run.args
    with ExitStack() as stack:
        sides = [
            stack.enter_context(
                ToolqWorker(
                    run.procs,
                    a.redis_url,
                    pool="threads",
                    concurrency=a.async_threads,
                    log=run.log(f"async-{i}"),
                )
            )
            for i in range(a.async_processes)
        ]
        deadline = time.monotonic() + 60
        while len(live_workers(sides[0].settings)) < a.async_processes:
            if time.monotonic() > deadline:
                raise RuntimeError("async workers not all live after 60 s")
            time.sleep(0.1)
        sequential(sides[0].round_trip, 0)
        seconds = toolq_naps(sides[0].client, a.io_calls, a.io_sleep, a.batch_timeout, "anap")
    ideal = a.io_sleep  # 1,000 concurrent slots: every call at once
    how = f"{a.async_processes} x `toolq worker --pool threads -c {a.async_threads}`"
    return {"calls": a.io_calls, "sleep_s": a.io_sleep, "processes": a.async_processes,
            "slots": a.async_processes * a.async_threads, "how": how, "seconds": seconds,
            "ideal_s": ideal, "over_ideal": seconds / ideal, "target_over_ideal": 1.5}  # fmt: skip


def pinning() -> dict[str, Any]:
    """Which cores Redis, the workers and the client get (``{}`` when not enough cores)."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) >= 3:
        return {"redis": {cores[0]}, "client": {cores[1]}, "workers": set(cores[2:])}
    if len(cores) == 2:
        return {"redis": {cores[0]}, "client": {cores[0]}, "workers": {cores[1]}}
    return {}


def scaling(run: Run, processes: int, pinned: bool) -> dict[str, Any]:
    """One ``--batch`` batch on one toolq worker with ``processes`` prefork processes."""
    from bench.peers.setups import toolq

    a = run.args
    pins = pinning() if pinned else {}
    wrap = ["taskset", "-c", ",".join(map(str, sorted(pins["workers"])))] if pins else None
    everything = os.sched_getaffinity(0)
    if pins:
        os.sched_setaffinity(a.redis_pid, pins["redis"])
        os.sched_setaffinity(0, pins["client"])
    try:
        with toolq("prefork", processes, wrap)(
            run.procs, a.redis_url, run.log(f"scaling-{processes}-{'pinned' if pins else 'free'}")
        ) as side:
            sequential(side.round_trip, 0)
            workers0, client0, busy0 = tree_cpu_s(side.proc.pid), own_cpu_s(), machine_busy()
            with measured(run.redis) as cost:
                _, total_s = side.batch(a.batch, a.batch_timeout)
            workers_s, client_s = tree_cpu_s(side.proc.pid) - workers0, own_cpu_s() - client0
            busy1 = machine_busy()
    finally:
        os.sched_setaffinity(0, everything)
        os.sched_setaffinity(a.redis_pid, everything)
    return {"processes": processes, "pinned": bool(pins), "calls": a.batch, "seconds": total_s,
            "calls_per_s": a.batch / total_s, "redis_cpu_util": cost[0].utilisation,
            "workers_cpu_util": workers_s / total_s, "client_cpu_util": client_s / total_s,
            "machine_busy": (busy1[0] - busy0[0]) / (busy1[1] - busy0[1]),
            "pinning": {k: sorted(v) for k, v in pins.items()}}  # fmt: skip


# -- the run ---------------------------------------------------------------------------------


def speed(args: argparse.Namespace) -> int:
    """Every section on the Redis at ``args.redis_url``."""
    logs = Path(args.logs) if args.logs else Path(tempfile.mkdtemp(prefix="toolq-speed-"))
    logs.mkdir(parents=True, exist_ok=True)
    client = redis.Redis.from_url(args.redis_url)
    run = Run(args, client, logs)
    started = time.monotonic()
    try:
        run.flush()
        env = _environment(args, client)
        print("Environment: " + "; ".join(f"{k}={v}" for k, v in env.items()), flush=True)
        print(f"Worker logs: {logs}")
        rows = []
        if "roundtrip" in args.sections:
            for setup in roundtrip_setups(args.dramatiq_tuned_threads, args.arq_poll_delay):
                if setup.system in args.systems:
                    measure = arq_roundtrip if setup.system == "arq" else roundtrip
                    got = run.attempt(setup.label, partial(measure, run, setup))
                    if got is not None:
                        rows.append(got)
        run.report["roundtrip"] = rows
        io = []
        if "io" in args.sections:
            for setup in io_setups():
                if setup.system in args.systems:
                    got = run.attempt(f"I/O-bound: {setup.label}", partial(io_bound, run, setup))
                    if got is not None:
                        io.append(got)
        run.report["io"] = io
        if "async" in args.sections:
            run.report["async"] = run.attempt("async tools", lambda: async_tools(run))
        if "scaling" in args.sections:
            run.report["scaling"] = [
                got
                for pinned in ((True, False) if pinning() else (False,))
                for k in args.scaling
                if (
                    got := run.attempt(
                        f"scaling {k}{' pinned' if pinned else ''}",
                        partial(scaling, run, k, pinned),
                    )
                )
                is not None
            ]
        if "breakdown" in args.sections:
            from bench.probes.breakdown import breakdown

            run.report["breakdown"] = run.attempt("toolq command breakdown", lambda: breakdown(run))
        if "profile" in args.sections:
            from bench.probes.profile import profile

            run.report["profile"] = run.attempt("toolq worker profile", lambda: profile(run))
        if "cells" in args.sections:
            # Its own private servers (one, then two cells): throughput and Redis CPU per cell.
            from bench.cells_speed import measure as cells_row
            from bench.cells_speed import render as render_cells

            run.report["cells"] = [
                got
                for n in (1, 2)
                if (
                    got := run.attempt(
                        f"toolq over {n} cell(s)",
                        partial(
                            cells_row, n, *((4, 5) if args.tiny else (40, 50)), 4, 1, 2, "prefork"
                        ),
                    )
                )
                is not None
            ]
            print("\nCells (bench/cells_speed.py):\n" + render_cells(run.report["cells"]))
        if "fairshare" in args.sections and "toolq" in args.systems:
            from bench.probes import fairshare

            fair = run.attempt(
                "fair share, one tenant",
                lambda: fairshare.measure(
                    run.procs,
                    args.redis_url,
                    logs,
                    args.fairshare_calls,
                    1 if args.tiny else 5,
                    args.batch_timeout,
                ),
            )
            run.report["fairshare"] = fair
            if fair is not None:
                print("\nFair share, one tenant (bench/probes/fairshare.py):")
                print(fairshare.render(fair))
        run.report["targets"] = speed_report.print_all(run.report, args)
        _finish(run, env, time.monotonic() - started)
    finally:
        run.procs.stop_all()
        try:
            run.flush()
        finally:
            client.close()
    return 1 if run.not_measured else 0


def _environment(args: argparse.Namespace, client: redis.Redis) -> dict[str, Any]:
    import celery
    import kombu

    import toolq

    info = client.info("server")
    versions = {"celery": celery.__version__, "kombu": kombu.__version__,
                "redis-py": redis.__version__, "hiredis": _hiredis(),
                "toolq": getattr(toolq, "__version__", "?")}  # fmt: skip
    try:
        import dramatiq

        versions["dramatiq"] = dramatiq.__version__
    except ImportError:
        pass
    uptime = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    return {
        "cores": os.cpu_count(),
        "python": sys.version.split()[0],
        "redis": f"{info['redis_version']} (private, {args.redis_binary}, pid {args.redis_pid})",
        "versions": versions,
        "dramatiq CLI defaults": dramatiq_defaults(),
        "commandstats counts script commands": f"EVAL issuing 2 commands -> +{args.script_probe}",
        "uptime": uptime,
    }


def _finish(run: Run, env: dict[str, Any], seconds: float) -> None:
    print()
    for what, reason in run.not_measured.items():
        print(f"NOT MEASURED: {what}: {reason}")
    end = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    print(f"Run took {seconds:.0f} s; uptime at the end: {end}")
    if run.args.json:
        document = {
            "command": ["python", "-m", "bench.speed", *sys.argv[1:]],
            "env": {**env, "uptime_end": end},
            "options": {k: v for k, v in vars(run.args).items() if k not in ("json", "logs")},
            **run.report,
            "not_measured": run.not_measured,
        }
        Path(run.args.json).write_text(json.dumps(document, indent=2, default=str))


def _list(allowed: tuple[str, ...]) -> Any:
    def parse(text: str) -> list[str]:
        names = [x.strip() for x in text.split(",") if x.strip()]
        unknown = sorted(set(names) - set(allowed))
        if unknown:
            raise argparse.ArgumentTypeError(f"unknown {unknown}; choose from {','.join(allowed)}")
        return names

    return parse


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Options; ``--tiny`` shrinks every size left unset (for the test of this script)."""
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--sections", type=_list(SECTIONS), default=list(SECTIONS))
    p.add_argument("--systems", type=_list(SYSTEMS), default=list(SYSTEMS))
    p.add_argument("--calls", type=int, help="sequential round trips (default 300)")
    p.add_argument("--batch", type=int, help="no-op calls in one batch (default 2000)")
    p.add_argument("--repeat", type=int, help="batches per system, median counts (default 3)")
    p.add_argument("--io-calls", type=int, help="I/O-bound calls (default 1000)")
    p.add_argument("--io-sleep", type=float, default=0.1, help="seconds each I/O call sleeps")
    p.add_argument("--scaling", type=lambda t: [int(x) for x in t.split(",")], default=[1, 2, 4])
    p.add_argument("--dramatiq-tuned-threads", type=int, default=16)
    p.add_argument("--arq-poll-delay", type=float, default=0.002, help="tuned arq, seconds")
    p.add_argument("--arq-slow-calls", type=int, default=40,
                   help="round trips of arq at its 0.5 s poll default")  # fmt: skip
    p.add_argument("--async-processes", type=int, default=2)
    p.add_argument("--async-threads", type=int, default=SLOTS)
    p.add_argument("--breakdown-batch", type=int, help="calls in the MONITORed batch (200)")
    p.add_argument("--breakdown-calls", type=int, help="MONITORed single calls (default 20)")
    p.add_argument("--breakdown-idle", type=float, help="seconds the idle worker is MONITORed (10)")
    p.add_argument("--fairshare-calls", type=int, help="calls in each fair-share batch (default "
                   "--batch)")  # fmt: skip
    p.add_argument("--profile-seconds", type=float, default=8.0)
    p.add_argument("--batch-timeout", type=float, default=300.0)
    p.add_argument("--tiny", action="store_true", help="tiny sizes: a smoke run")
    p.add_argument("--json", metavar="PATH")
    p.add_argument("--logs", metavar="DIR")
    args = p.parse_args(argv)
    # A smoke run checks that each section runs and prints its figures, not their size: every
    # size (and the idle MONITOR's wait) is as small as still gives each table a row.
    sizes = {"calls": (300, 10), "batch": (2000, 50), "io_calls": (1000, 40), "repeat": (3, 1),
             "breakdown_batch": (200, 10), "breakdown_calls": (20, 5),
             "breakdown_idle": (10.0, 2.0), "fairshare_calls": (None, 50)}  # fmt: skip
    for key, (full, tiny) in sizes.items():
        if getattr(args, key) is None:
            setattr(args, key, tiny if args.tiny else full)
    if args.fairshare_calls is None:
        args.fairshare_calls = args.batch
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, exit_on_signal)
    signal.signal(signal.SIGINT, exit_on_signal)
    with private_redis() as server:
        args.redis_url, args.redis_pid, args.redis_binary = server.url, server.pid, server.binary
        probe = redis.Redis.from_url(server.url)
        args.script_probe = scripts_counted(probe)
        probe.close()
        return speed(args)


if __name__ == "__main__":
    sys.exit(main())
