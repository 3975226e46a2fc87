"""The tables of ``bench.speed``: the systems' table, ratios, memory, I/O, scaling, targets."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any

from bench.tables import heading, ratio


def _f(value: float | None, fmt: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return format(value, fmt)


def main_table(rows: list[dict[str, Any]], io: list[dict[str, Any]]) -> None:
    """One row per system and configuration, like the speed report's table."""
    io_by_system = {r["system"]: r for r in io}
    head = (
        f"{'system':<30}{'':<8}{'p50 ms':>8}{'p99 ms':>8}{'batch/s':>9}"
        f"{'CPU µs/call':>12}{'cmd/call':>9}{'1-call CPU':>11}{'1-call cmd':>11}"
        f"{'I/O s':>7}{'wrk CPU':>9}{'cli CPU':>9}"
    )
    print(head)
    print("-" * len(head))
    shown: set[str] = set()
    for r in rows:
        io_s = None
        if r["system"] not in shown and r["system"] in io_by_system:
            io_s = io_by_system[r["system"]]["seconds"]
            shown.add(r["system"])
        print(
            f"{r['label']:<30}{r['tuning']:<8}{_f(r['p50_ms'], '.2f'):>8}"
            f"{_f(r['p99_ms'], '.2f'):>8}{r['batch_calls_per_s']:>9.0f}"
            f"{r['batched']['redis_cpu_us_per_call']:>12.0f}"
            f"{r['batched']['commands_per_call']:>9.1f}"
            f"{r['single']['redis_cpu_us_per_call']:>11.0f}"
            f"{r['single']['commands_per_call']:>11.1f}{_f(io_s, '.2f'):>7}"
            f"{_f(r.get('workers_cpu_us_per_call'), '.0f'):>9}"
            f"{_f(r.get('client_cpu_us_per_call'), '.0f'):>9}"
        )
    print(
        "(batch/s: the median batch of no-op calls, first send to last result; CPU µs/call and "
        "cmd/call: Redis CPU and INFO commandstats over the batches / calls, scripts' inner "
        "commands included; 1-call: the same over the sequential round trips; I/O s: the "
        "I/O-bound case below, on the system's first row; wrk/cli CPU: µs of CPU per call of "
        "the worker processes and of this client over the batch, not measured for arq, whose "
        "client runs in its own venv)"
    )


def best_peer_ratios(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Each toolq row against the best peer on each figure."""
    peers = [r for r in rows if r["system"] != "toolq"]
    figures: dict[str, tuple[Callable[[dict[str, Any]], float], bool]] = {
        "p50_ms": (lambda r: r["p50_ms"], False),
        "batch_calls_per_s": (lambda r: r["batch_calls_per_s"], True),
        "redis_cpu_us_per_call": (lambda r: r["batched"]["redis_cpu_us_per_call"], False),
        "commands_per_call": (lambda r: r["batched"]["commands_per_call"], False),
    }
    out: dict[str, Any] = {}
    if not peers:
        return out
    head = f"{'toolq / best peer':<30}" + "".join(f"{name:>30}" for name in figures)
    print()
    print(head)
    print("-" * len(head))
    for r in (r for r in rows if r["system"] == "toolq"):
        line = f"{r['label']:<30}"
        out[r["key"]] = {}
        for name, (get, higher) in figures.items():
            valid = [p for p in peers if not math.isnan(get(p))]
            best = (max if higher else min)(valid, key=get)
            x = ratio(get(r), get(best))
            out[r["key"]][name] = {"ratio": x, "best_peer": best["label"]}
            cell = f"{x:.2f}x ({best['key']})"
            line += f"{cell:>30}"
        print(line)
    return out


def memory_table(rows: list[dict[str, Any]]) -> None:
    """Redis memory per finished toolq call and the keys behind it."""
    for r in (r for r in rows if r.get("keys")):
        heading(f"Redis memory of finished calls: {r['label']} (TTLs as shipped)")
        per = r["batched"]["memory_bytes_per_call"]
        print(
            f"INFO used_memory delta over the {r['batches']} batches of {r['batch']} calls / "
            f"calls: {per:,.0f} B"
        )
        runs = r["keys"]["batch_run"]
        total = sum(k["bytes"] for k in runs)
        print(
            "keys of the batch's run: "
            + ", ".join(f"{k['key']} ({k['type']}) {k['bytes']:,} B" for k in runs)
            + f" = {total / r['batch']:,.0f} B per call"
        )
        sample = r["keys"].get("sample_call")
        if sample:
            fields = ", ".join(f"{k} {v}" for k, v in sorted(sample["fields"].items(),
                                                             key=lambda kv: -kv[1]))  # fmt: skip
            print(
                f"a finished call's record ({sample['key']}): {sample['bytes']:,} B, "
                f"{sample['encoding']} encoding (server limits {sample['listpack_limits']}); "
                f"{len(sample['fields'])} fields, value lengths: {fields}"
            )
        print(f"{'key (ids as {id})':<44}{'type':>8}{'keys':>7}{'B/key':>9}{'total KB':>10}")
        for k in r["keys"]["kinds"][:14]:
            print(
                f"{k['key'][:43]:<44}{k['type']:>8}{k['keys']:>7}"
                f"{k['bytes_per_key']:>9,.0f}{k['bytes'] / 1024:>10,.1f}"
            )


def io_table(io: list[dict[str, Any]], async_: dict[str, Any] | None) -> None:
    """The I/O-bound case and the async tools."""
    if io:
        calls, sleep = io[0]["calls"], io[0]["sleep_s"]
        heading(
            f"I/O-bound: {calls} calls x {sleep * 1000:g} ms sleep on {io[0]['slots']} slots "
            f"(ideal {io[0]['ideal_s']:.2f} s)"
        )
        for r in io:
            print(
                f"{r['label']:<30}{r['seconds']:>8.2f} s{r['over_ideal']:>7.2f}x ideal"
                f"{r['redis']['redis_cpu_us_per_call']:>9.0f} µs Redis CPU/call"
                f"{r['redis']['commands_per_call']:>7.1f} cmd/call"
            )
    if async_:
        print(
            f"\nasync tools: {async_['calls']} x `async def` + asyncio.sleep"
            f"({async_['sleep_s']:g}) on {async_['how']} ({async_['slots']} slots): "
            f"{async_['seconds']:.2f} s = {async_['over_ideal']:.1f}x the {async_['ideal_s']:g} s "
            f"of {async_['calls']} concurrent slots (target <= {async_['target_over_ideal']}x)"
        )


def scaling_table(points: list[dict[str, Any]], batch: int) -> None:
    """Batch throughput by toolq prefork processes, pinned, with CPU use of each part."""
    if not points:
        return
    pins: dict[str, list[int]] = next((p["pinning"] for p in points if p["pinning"]), {})
    where = ", ".join(f"{k} on core {','.join(map(str, v))}" for k, v in pins.items())
    heading(
        f"Scaling: {batch} no-op calls by toolq prefork processes (pinned: {where or 'no'}; "
        "free: no pinning)"
    )
    print(f"{'processes':>9}{'':>8}{'calls/s':>9}{'x 1st':>7}{'Redis CPU':>11}"
          f"{'workers CPU':>13}{'client CPU':>12}{'machine busy':>14}")  # fmt: skip
    first: dict[bool, float] = {}
    for p in points:
        base = first.setdefault(p["pinned"], p["calls_per_s"])
        print(
            f"{p['processes']:>9}{'pinned' if p['pinned'] else 'free':>8}"
            f"{p['calls_per_s']:>9.0f}{p['calls_per_s'] / base:>7.2f}"
            f"{p['redis_cpu_util']:>10.0%} {p['workers_cpu_util']:>12.0%}"
            f"{p['client_cpu_util']:>11.0%}{p['machine_busy']:>13.0%}"
        )
    print(
        "(CPU: busy fraction of one core over the batch; workers = every process of the "
        "worker; machine busy: all cores, every process on the host, from /proc/stat)"
    )


def targets(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The speed targets, each with the figures it was judged on and PASS/MISS."""
    rows = {r["key"]: r for r in report.get("roundtrip", [])}
    io = {r["system"]: r for r in report.get("io", [])}
    out: list[dict[str, Any]] = []

    def add(name: str, ok: bool | None, detail: str) -> None:
        verdict = "MEASURED" if ok is None else ("PASS" if ok else "MISS")
        out.append({"target": name, "verdict": verdict, "detail": detail})

    d = rows.get("dramatiq-default")
    for key in ("toolq-prefork", "toolq-threads"):
        t = rows.get(key)
        if t is None:
            continue
        if d is not None:
            x = t["batch_calls_per_s"] / d["batch_calls_per_s"]
            add(f"{t['label']}: batch calls/s >= 1.0x dramatiq defaults", x >= 1.0,
                f"{t['batch_calls_per_s']:.0f} vs {d['batch_calls_per_s']:.0f} = {x:.2f}x"
                f" (stretch 1.5x: {'PASS' if x >= 1.5 else 'MISS'})")  # fmt: skip
            for phase in ("batched", "single"):
                tc, dc = t[phase]["redis_cpu_us_per_call"], d[phase]["redis_cpu_us_per_call"]
                add(f"{t['label']}: Redis CPU/call <= dramatiq's ({phase})", tc <= dc,
                    f"{tc:.0f} vs {dc:.0f} µs = {tc / dc:.2f}x")  # fmt: skip
        for phase in ("batched", "single"):
            c = t[phase]["commands_per_call"]
            add(f"{t['label']}: <= 20 Redis commands/call ({phase})", c <= 20, f"{c:.1f}")
        if t.get("keys"):
            m = t["batched"]["memory_bytes_per_call"]
            add(f"{t['label']}: Redis memory per finished call", None, f"{m:,.0f} B")
        c = rows.get(key.replace("toolq", "celery"))
        if c is not None:
            add(f"{t['label']}: p50 <= raw Celery's ({c['label']})", t["p50_ms"] <= c["p50_ms"],
                f"{t['p50_ms']:.2f} vs {c['p50_ms']:.2f} ms")  # fmt: skip
    if "toolq" in io and "dramatiq" in io:
        t, d2 = io["toolq"]["seconds"], io["dramatiq"]["seconds"]
        add("I/O-bound on 50 slots: toolq <= dramatiq", t <= d2, f"{t:.2f} vs {d2:.2f} s")
    a = report.get("async")
    if a:
        add(f"async tools on <= 2 processes: <= 1.5x {a['ideal_s']:g} s", a["over_ideal"] <= 1.5,
            f"{a['seconds']:.2f} s = {a['over_ideal']:.1f}x")  # fmt: skip
    f = report.get("fairshare")
    if f:
        add("fair share, one tenant: batch >= 0.90x without it",
            f["ratio"] >= f["target_ratio"],
            f"{f['fair_share_calls_per_s']:,.0f} vs {f['plain_calls_per_s']:,.0f} calls/s:"
            f" {f['ratio']:.2f}x")  # fmt: skip
    if report.get("scaling"):
        pts = report["scaling"]
        add("scaling with 1, 2, 4 processes measured", None,
            ", ".join(f"{p['processes']}{' pinned' if p['pinned'] else ''}: "
                      f"{p['calls_per_s']:.0f}/s" for p in pts))  # fmt: skip
    return out


def print_all(report: dict[str, Any], args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every table; returns the targets with their verdicts."""
    rows, io = report.get("roundtrip", []), report.get("io", [])
    if rows:
        heading(
            f"No-op calls: {args.calls} sequential round trips (after 20 warm-up), "
            f"{args.repeat} batches of {args.batch} calls (median); same private Redis, one "
            "system at a time"
        )
        main_table(rows, io)
        report["toolq_over_best_peer"] = best_peer_ratios(rows)
        print()
        for r in rows:
            print(f"  {r['label']:<30}{r['tuning']}: {r['why']}")
        memory_table(rows)
    io_table(io, report.get("async"))
    scaling_table(report.get("scaling") or [], args.batch)
    if report.get("breakdown"):
        from bench.probes.breakdown import print_breakdown

        print_breakdown(report["breakdown"])
    if report.get("profile"):
        from bench.probes.profile import print_profile

        print_profile(report["profile"])
    verdicts = targets(report)
    if verdicts:
        heading("Speed targets")
        for v in verdicts:
            print(f"{v['verdict']:<9}{v['target']}: {v['detail']}")
    return verdicts
