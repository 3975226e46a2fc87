"""Run the chaos harness for several seeds back to back; fail if any run loses a call.

    python -m bench.chaos.matrix --seeds 2026-2030 --duration 240 --fault-interval 4 \\
        --clients 5 --calls 200 --inflight 3 --workers 5 --out /tmp/chaos-matrix

Every other option is the harness's (``python -m bench.chaos.harness --help``). Each seed
runs in ``OUT/seed-N``; the table of all runs goes to stdout and ``OUT/matrix.json``.
Exit status 1 when any run violated an invariant (lost, duplicate, overlap, phantom, ...)
or had a worker exit by itself with status 0 (which no supervisor would notice).
"""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path
from typing import Any

from bench.chaos import harness
from bench.procs import exit_on_signal

COLUMNS = (
    "seed",
    "accepted",
    "succeeded",
    "lost",
    "duplicates",
    "overlaps",
    "phantoms",
    "self_exits",
    "exited_0",
    "resent_lost",
    "stranded_max_s",
    "faults",
    "result",
)


def parse_seeds(text: str) -> list[int]:
    """``2026-2030`` or ``1,5,9`` (or a mix) as a list of seeds."""
    seeds: list[int] = []
    for part in text.split(","):
        first, _, last = part.strip().partition("-")
        seeds += range(int(first), int(last or first) + 1)
    return seeds


def row(seed: int, report: dict[str, Any]) -> dict[str, Any]:
    """One run's figures for the table."""
    v = report["violations"]
    return {
        "seed": seed,
        "accepted": report["accepted"],
        "succeeded": report["completed"].get("succeeded", 0),
        "lost": v["lost"],
        "duplicates": v["duplicates"],
        "overlaps": v["overlaps"],
        "phantoms": v["phantoms"],
        "self_exits": len(report["unexpected_worker_exits"]),
        "exited_0": report["unnoticed_worker_exits"],
        "resent_lost": report["lost_message_resends"]["n"],
        "stranded_max_s": report["lost_message_resends"]["stranded_s"]["max"],
        "faults": sum(report["fault_counts"].values()),
        "result": "PASS" if report["ok"] else "FAIL",
        "other_violations": {k: n for k, n in v.items() if n and k not in COLUMNS},
        "completed": report["completed"],
        "fault_counts": report["fault_counts"],
    }


def main(argv: list[str] | None = None) -> int:
    """Entry point; SIGTERM/SIGINT stop the current run cleanly (see ``harness.main``)."""
    signal.signal(signal.SIGTERM, exit_on_signal)
    signal.signal(signal.SIGINT, exit_on_signal)
    args = list(sys.argv[1:] if argv is None else argv)
    seeds_at = args.index("--seeds")
    seeds = parse_seeds(args[seeds_at + 1])
    del args[seeds_at : seeds_at + 2]
    base = harness.parse_args(args)
    out: Path = base.out
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for seed in seeds:
        base.seed, base.out = seed, out / f"seed-{seed}"
        harness.run(base)
        report = json.loads((base.out / "report.json").read_text())
        rows.append(row(seed, report))
        (out / "matrix.json").write_text(json.dumps(rows, indent=1))
    print(" ".join(f"{c:>14}" for c in COLUMNS))
    for r in rows:
        print(" ".join(f"{r[c]!s:>14}" for c in COLUMNS))
    failed = [r["seed"] for r in rows if r["result"] != "PASS"]
    print(f"matrix: {len(rows) - len(failed)}/{len(rows)} runs passed"
          + (f"; failed seeds {failed}" if failed else ""))  # fmt: skip
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
