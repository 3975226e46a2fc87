"""Where the time of the speed benchmark's async case goes: each call's timeline, a breakdown.

    python -m bench.probes.async_timeline [--calls 1000] [--sleep 0.1] [--processes 2]
                                          [--threads 50] [--repeat 5] [--json PATH] [--logs DIR]

Runs the case as ``bench.speed --sections async`` does: a private Redis, ``--processes`` x
``toolq worker --pool threads -c --threads`` (prefetch multiplier 4, toolq's default without
the dangerous queue), one ``client.dispatch`` of ``--calls`` ``async def`` calls that each
sleep ``--sleep`` s, then ``wait``. The tool is ``anap_stamped`` (``anap`` returning its pid
and when its sleep began and ended), and the workers load ``bench.probes.timeline_app``, which
notes when each message was received and when each ``START``/``FINISH`` round trip was sent and
answered. For every call, relative to the dispatch's start:

    created      its CREATE_GROUP ran       (the ``call.queued`` event id: Redis clock, ms)
    received     its message was decoded    (Celery's consumer, ``task_received``)
    picked       a pool thread took it      (``task_prerun``)
    start sent / start back   its START round trip (``CallStore.commit``)
    started      START ran                  (the ``call.started`` event id, ms)
    began / ended             the handler's sleep (its own stamps)
    finish sent / finish back its FINISH round trip (``CallStore.commit``)
    finished     FINISH ran                 (the final event id, ms)
    returned     ``wait()`` returned        (one time for all calls)

It prints when the first, median and last call reached each point, the per-call intervals,
the critical path of the call that finished last, the round trips (START, FINISH, the
waiter's ``XREAD``), and the CPU each party spent (client, workers, Redis) against what two
cores hold in the run's wall time. Each figure is the median over ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import redis  # noqa: E402

from bench.figures import percentile  # noqa: E402
from bench.probes.redis_cost import measured, own_cpu_s, private_redis, tree_cpu_s  # noqa: E402

POINTS = (
    "created",
    "received",
    "picked",
    "start sent",
    "started",
    "start back",
    "began",
    "ended",
    "finish sent",
    "finished",
    "finish back",
)
STAGES = (
    ("dispatch (client, then its CREATE_GROUP)", "t0", "created"),
    ("delivery to a worker's consumer", "created", "received"),
    ("consumer -> pool thread", "received", "picked"),
    ("pool thread -> START sent", "picked", "start sent"),
    ("START round trip", "start sent", "start back"),
    ("START reply -> handler began (loop)", "start back", "began"),
    ("handler (sleep)", "began", "ended"),
    ("handler ended -> FINISH sent", "ended", "finish sent"),
    ("FINISH round trip", "finish sent", "finish back"),
    ("FINISH ran -> wait() returned", "finished", "returned"),
)


@dataclass
class Run:
    """One dispatch + wait: the client's times, each call's points, the round trips."""

    total: float
    dispatch: float
    points: dict[str, dict[str, float]]
    """call id -> point -> seconds since the dispatch's start."""
    pid: dict[str, int]
    round_trips: dict[str, list[tuple[float, float, int]]]
    """``start_many``/``finish_many``/``xread`` -> (sent, back, items), seconds since start."""
    cpu: dict[str, float]
    wall_cores: float = 0.0
    per_pid: dict[int, dict[str, float]] = field(default_factory=dict)
    consumer: dict[str, list[float]] = field(default_factory=dict)
    """Each consumer's message cycles: seconds in each of ``CYCLE``'s parts."""


def _thread_cpu(pid: int) -> dict[int, float]:
    """CPU seconds (user + system) of each thread of process ``pid``, by native id."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended
            continue
        out[int(task.name)] = (int(fields[11]) + int(fields[12])) / tick
    return out


def _by_thread(
    log_dir: Path, pid: int, before: dict[int, float], after: dict[int, float]
) -> dict[str, float]:
    """CPU seconds between two ``_thread_cpu`` readings, by thread name (numbers dropped)."""
    names_file = log_dir / f"{pid}.threads.json"
    names = json.loads(names_file.read_text()) if names_file.exists() else {}
    out: dict[str, float] = defaultdict(float)
    for tid, cpu in after.items():
        name = re.sub(r"[-_]\d+(_\d+)?$", "", names.get(str(tid), "(unnamed)"))
        out[name] += cpu - before.get(tid, 0.0)
    return dict(out)


def _ms_of(entry_id: bytes) -> float:
    return int(entry_id.split(b"-")[0]) / 1000


def _quantiles(values: list[float]) -> tuple[float, float, float, float]:
    """min, median, 90th percentile and max."""
    return min(values), statistics.median(values), percentile(values, 90), max(values)


@contextmanager
def _xreads(client: Any, into: list[tuple[float, float, int]]) -> Iterator[None]:
    """Note every ``XREAD`` of ``client``'s waiter: when sent, when answered, entries read."""
    conn = client.log.redis
    original: Callable[..., Any] = conn.xread

    def xread(*args: Any, **kwargs: Any) -> Any:
        sent = time.time()
        reply = original(*args, **kwargs)
        into.append((sent, time.time(), sum(len(entries) for _, entries in reply or [])))
        return reply

    conn.xread = xread
    try:
        yield
    finally:
        del conn.xread


def one_run(
    side: Any, workers: list[Any], r: redis.Redis, log_dir: Path, args: argparse.Namespace
) -> Run:
    """Dispatch ``--calls`` stamped sleeps, wait, and join every stamp to its call."""
    from toolq.models import CallStatus

    for path in log_dir.glob("*.jsonl"):
        path.unlink()
    payload = [
        {"id": f"call_{uuid.uuid4().hex}", "name": "anap_stamped", "arguments": {"seconds": s}}
        for s in [args.sleep] * args.calls
    ]
    xreads: list[tuple[float, float, int]] = []
    cpu0 = [tree_cpu_s(w.proc.pid) for w in workers]
    threads0 = [_thread_cpu(w.proc.pid) for w in workers]
    with measured(r) as cost, _xreads(side.client, xreads):
        c0, t0 = own_cpu_s(), time.time()
        batch = side.client.dispatch(payload)
        c1, t1 = own_cpu_s(), time.time()
        results = batch.wait(timeout=60)
        c2, t2 = own_cpu_s(), time.time()
    time.sleep(0.3)  # the workers' last log lines (FINISH replies) are written after the events
    workers_cpu = sum(tree_cpu_s(w.proc.pid) for w in workers) - sum(cpu0)
    threads: dict[str, float] = defaultdict(float)
    for w, before in zip(workers, threads0, strict=True):
        for name, spent in _by_thread(log_dir, w.proc.pid, before, _thread_cpu(w.proc.pid)).items():
            threads[name] += spent
    bad = [x for x in results if x.status is not CallStatus.SUCCEEDED]
    if bad:
        raise RuntimeError(f"{len(bad)} calls did not succeed, e.g. {bad[0]}")
    points: dict[str, dict[str, float]] = {x.call_id: {} for x in results}
    pid: dict[str, int] = {}
    for x in results:
        out = x.output
        points[x.call_id]["began"] = out["began"] - t0
        points[x.call_id]["ended"] = out["ended"] - t0
        pid[x.call_id] = int(out["pid"])
    kind = {b"call.queued": "created", b"call.started": "started", b"call.succeeded": "finished"}
    stream = side.client.store.keys.run_stream(batch.run_id)
    entries: Any = r.xrange(stream)
    for entry_id, fields in entries:
        point = kind.get(fields[b"type"])
        if point is not None:
            points[fields[b"call_id"].decode()][point] = _ms_of(entry_id) - t0
    trips: dict[str, list[tuple[float, float, int]]] = defaultdict(list)
    per_pid: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    brpops: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for path in log_dir.glob("*.jsonl"):
        for line in path.read_text().splitlines():
            note = json.loads(line)
            if note["step"].startswith("brpop"):
                if t0 <= note.get("at", note.get("began", 0.0)) <= t2:
                    brpops[note["pid"]].append(note)
                continue
            # Only this run's calls (a line of the run before may come late).
            step, calls = note["step"], [c for c in note["calls"] if c in points]
            if not calls:
                continue
            if step in ("received", "prerun"):
                name = "received" if step == "received" else "picked"
                for call_id in calls:
                    points[call_id][name] = note["at"] - t0
                if step == "received":
                    per_pid[note["pid"]]["messages"] += 1
                    per_pid[note["pid"]]["calls"] += len(calls)
            elif step in ("start_many", "finish_many"):
                sent, back = note["sent"] - t0, note["back"] - t0
                trips[step].append((sent, back, len(calls)))
                prefix = step.split("_")[0]
                for call_id in calls:
                    points[call_id][f"{prefix} sent"] = sent
                    points[call_id][f"{prefix} back"] = back
    for stamps in points.values():
        stamps["t0"] = 0.0
        stamps["returned"] = t2 - t0
    trips["xread"] = [(a - t0, b - t0, n) for a, b, n in xreads]
    created: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for call_id, c in points.items():
        if "received" in c and "created" in c:
            created[pid[call_id]].append((c["received"] + t0, c["created"] + t0))
    consumer = _consumer_cycles(brpops, created)
    cpu = {
        "client dispatch": c1 - c0,
        "client wait": c2 - c1,
        "workers": workers_cpu,
        # indented: the workers' CPU by thread (a part of the line above)
        **{f"  {name}": v for name, v in sorted(threads.items(), key=lambda kv: -kv[1])},
        "redis": cost[0].cpu_s,
    }
    return Run(
        t2 - t0,
        t1 - t0,
        points,
        pid,
        dict(trips),
        cpu,
        (t2 - t0) * (os.cpu_count() or 1),
        {p: dict(v) for p, v in per_pid.items()},
        consumer,
    )


def summary(run: Run) -> dict[str, Any]:
    """The figures printed for one run (seconds)."""
    calls = list(run.points.values())
    out: dict[str, Any] = {"total": run.total, "dispatch returned": run.dispatch}
    out["reached"] = {
        p: _quantiles([c[p] for c in calls if p in c]) for p in POINTS if any(p in c for c in calls)
    }
    out["missing"] = {p: sum(p not in c for c in calls) for p in POINTS}
    out["stages"] = {
        name: _quantiles([c[b] - c[a] for c in calls if a in c and b in c]) for name, a, b in STAGES
    }
    last = max(calls, key=lambda c: c.get("finished", 0.0))
    out["last call"] = {p: last[p] for p in ("t0", *POINTS, "returned") if p in last}
    out["round trips"] = {
        step: {
            "count": len(trips),
            "items per trip": statistics.fmean(n for _, _, n in trips) if trips else 0.0,
            "seconds p50": statistics.median(b - a for a, b, _ in trips) if trips else 0.0,
            "seconds max": max((b - a for a, b, _ in trips), default=0.0),
        }
        for step, trips in run.round_trips.items()
    }
    last_read = max(back for _, back, _ in run.round_trips["xread"])
    finished = max(c.get("finished", 0.0) for c in calls)
    out["tail"] = {
        "last FINISH ran -> its XREAD answered": last_read - finished,
        "XREAD answered -> wait() returned": run.total - last_read,
    }
    out["cpu"] = dict(run.cpu)
    out["cpu"]["total"] = sum(v for k, v in run.cpu.items() if not k.startswith(" "))
    out["cpu"]["cores x wall"] = run.wall_cores
    out["consumer gap when backlogged"] = _consumer_gaps(run)
    out["consumer cycle"] = {
        part: _quantiles(v) if v else (0.0, 0.0, 0.0, 0.0) for part, v in run.consumer.items()
    }
    lags = [c["ended"] - c["began"] for c in calls]
    out["handler over its sleep, max"] = max(lags)
    out["processes"] = {
        str(p): {k: int(v) for k, v in got.items()} for p, got in sorted(run.per_pid.items())
    }
    return out


CYCLE = (
    "BRPOP sent -> its reply read",
    "reply read -> message handed to the pool",
    "handed -> next BRPOP sent",
)


def _consumer_cycles(
    brpops: dict[int, list[dict[str, Any]]], created: dict[int, list[tuple[float, float]]]
) -> dict[str, list[float]]:
    """Each consumer's cycles for messages already queued when it asked for them.

    ``brpops``: a process's ``bench.probes.timeline_app`` notes; ``created``: its messages'
    ``(received, created)`` (``time.time()``). A cycle is cut at the notes (``CYCLE``).
    """
    out: dict[str, list[float]] = {part: [] for part in CYCLE}
    for pid, notes in brpops.items():
        sent: float | None = None
        handled: float | None = None
        for note in sorted(notes, key=lambda n: n.get("at", n.get("began", 0.0))):
            if note["step"] == "brpop_sent":
                if handled is not None:
                    out[CYCLE[2]].append(note["at"] - handled)
                sent, handled = note["at"], None
                continue
            began, end = note["began"], note["handled"]
            message = [c for r, c in created.get(pid, []) if began <= r <= end]
            if sent is not None and message and message[0] < sent:
                out[CYCLE[0]].append(began - sent)
                out[CYCLE[1]].append(end - began)
                handled = end
            sent = None
    return out


def _consumer_gaps(run: Run) -> tuple[float, float, float, float]:
    """Time between two messages a consumer received while the second was already queued.

    That is how long one process's consumer takes per message when it has a backlog.
    """
    messages: dict[int, dict[float, float]] = defaultdict(dict)  # pid -> received -> created
    for call_id, c in run.points.items():
        if "received" in c and "created" in c:
            got = messages[run.pid[call_id]]
            got[c["received"]] = min(got.get(c["received"], c["created"]), c["created"])
    gaps = []
    for got in messages.values():
        order = sorted(got.items())
        for (before, _), (received, created) in itertools.pairwise(order):
            if created < before:
                gaps.append(received - before)
    return _quantiles(gaps) if gaps else (0.0, 0.0, 0.0, 0.0)


def _median_of(summaries: list[dict[str, Any]], *path: str) -> Any:
    """The median of the same figure (a number or a tuple of numbers) over the runs."""
    values = []
    for s in summaries:
        v: Any = s
        for key in path:
            v = v[key]
        values.append(v)
    if isinstance(values[0], tuple | list):
        return tuple(statistics.median(v[i] for v in values) for i in range(len(values[0])))
    return statistics.median(values)


def print_report(summaries: list[dict[str, Any]], args: argparse.Namespace, load: str) -> None:
    """The tables, each figure the median over the runs (milliseconds)."""
    med = functools.partial(_median_of, summaries)
    n = len(summaries)
    totals = ", ".join(f"{s['total'] * 1000:.0f}" for s in summaries)
    print(
        f"\n{args.calls} x anap_stamped({args.sleep:g}) on {args.processes} x `toolq worker "
        f"--pool threads -c {args.threads}`; {n} runs; load before: {load}"
    )
    print(
        f"total (dispatch start -> wait returned), ms: {totals}; median "
        f"{med('total') * 1000:.0f} = {med('total') / args.sleep:.1f}x the ideal "
        f"{args.sleep * 1000:.0f}; dispatch() returned at {med('dispatch returned') * 1000:.0f}"
    )
    print("\nWhen the calls reached each point (ms since dispatch start; median of runs)")
    print(f"{'point':<14}{'first':>8}{'median':>8}{'p90':>8}{'last':>8}")
    for p in POINTS:
        if p in summaries[0]["reached"]:
            q = med("reached", p)
            print(f"{p:<14}" + "".join(f"{v * 1000:>8.1f}" for v in q))
    print("\nPer-call intervals (ms; median of runs)")
    print(f"{'stage':<42}{'min':>8}{'median':>8}{'p90':>8}{'max':>8}")
    for name, _, _ in STAGES:
        q = med("stages", name)
        print(f"{name:<42}" + "".join(f"{v * 1000:>8.1f}" for v in q))
    print("\nThe call that finished last (first run), ms since dispatch start")
    last = summaries[0]["last call"]
    print("  " + ", ".join(f"{p} {v * 1000:.1f}" for p, v in last.items()))
    print("\nRound trips (median of runs)")
    for step in summaries[0]["round trips"]:
        count = med("round trips", step, "count")
        items = med("round trips", step, "items per trip")
        p50 = med("round trips", step, "seconds p50")
        top = med("round trips", step, "seconds max")
        print(
            f"  {step:<12} {count:>6.0f} trips, {items:6.1f} items each, "
            f"p50 {p50 * 1000:.1f} ms, max {top * 1000:.1f} ms"
        )
    print(
        "\nThe waiter's tail (ms; median of runs): "
        + ", ".join(f"{k} {med('tail', k) * 1000:.1f}" for k in summaries[0]["tail"])
    )
    print("\nCPU spent during the run (median of runs): seconds, µs per call")
    for k in summaries[0]["cpu"]:
        if all(k in s["cpu"] for s in summaries):
            v = med("cpu", k)
            print(f"  {k:<28}{v:>8.3f}{v * 1e6 / args.calls:>8.0f}")
    gaps = zip(("min", "median", "p90", "max"), med("consumer gap when backlogged"), strict=True)
    print(
        "\na consumer's time per message while its queue had a backlog (received to received), "
        "ms: " + ", ".join(f"{k} {v * 1000:.1f}" for k, v in gaps)
    )
    print(
        f"{'a consumer cycle, message already queued (ms)':<48}"
        f"{'min':>8}{'median':>8}{'p90':>8}{'max':>8}"
    )
    for part in CYCLE:
        print(f"{part:<48}" + "".join(f"{v * 1000:>8.1f}" for v in med("consumer cycle", part)))
    print(
        f"handler over its {args.sleep:g} s sleep, worst call: "
        f"{(med('handler over its sleep, max') - args.sleep) * 1000:.1f} ms"
    )
    print(
        "messages / calls per worker process (each run): "
        + "; ".join(
            " | ".join(f"{v['messages']}/{v['calls']}" for v in s["processes"].values())
            for s in summaries
        )
    )


def timeline(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Start Redis and the workers, warm up, then ``--repeat`` runs; their summaries."""
    from bench.peers.toolq_side import ToolqWorker
    from bench.procs import Procs
    from toolq.cli.check import live_workers

    logs = Path(args.logs or tempfile.mkdtemp(prefix="toolq-timeline-"))
    probe_dir = logs / "probes"
    probe_dir.mkdir(parents=True, exist_ok=True)
    procs = Procs()
    summaries = []
    with private_redis() as server, ExitStack() as stack:
        stack.callback(procs.stop_all)
        env = {"BENCH_TIMELINE_LOG": str(probe_dir)}
        workers = [
            stack.enter_context(
                ToolqWorker(
                    procs,
                    server.url,
                    pool="threads",
                    concurrency=args.threads,
                    log=logs / f"worker-{i}.log",
                    app="bench.probes.timeline_app:registry",
                    env=env,
                )
            )
            for i in range(args.processes)
        ]
        deadline = time.monotonic() + 60
        while len(live_workers(workers[0].settings)) < args.processes:
            if time.monotonic() > deadline:
                raise RuntimeError("workers not all live after 60 s")
            time.sleep(0.1)
        r = redis.Redis.from_url(server.url)
        side = workers[0]
        side.round_trip()
        side.client.dispatch(
            [
                {"id": f"w{i}", "name": "anap_stamped", "arguments": {"seconds": 0.01}}
                for i in range(args.calls // 4)
            ]
        ).wait(timeout=60)  # warm-up: every pool thread and the event loops started
        for _ in range(args.repeat):
            summaries.append(summary(one_run(side, workers, r, probe_dir, args)))
            time.sleep(0.5)
        r.close()
    print(f"worker logs and probe lines: {logs}")
    return summaries


def main(argv: list[str] | None = None) -> int:
    """Run the timeline and print it."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=1000)
    p.add_argument("--sleep", type=float, default=0.1)
    p.add_argument("--processes", type=int, default=2)
    p.add_argument("--threads", type=int, default=50)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--json", help="write every run's summary here")
    p.add_argument("--logs", help="worker logs and probe lines (default: a new temp dir)")
    args = p.parse_args(argv)
    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    summaries = timeline(args)
    print_report(summaries, args, load.split("load average:")[-1].strip())
    if args.json:
        Path(args.json).write_text(json.dumps(summaries, indent=2, default=list))
    return 0


if __name__ == "__main__":
    sys.exit(main())
