"""A short chaos matrix: two seeds, every fault kind under load; the invariants must hold.

Runs ``python -m bench.chaos.matrix`` in a subprocess: for each seed its own Redis (AOF,
``appendfsync always``) on a free port, its own workers, clients and approver. See
``bench/chaos`` for what each fault does and how the checker counts.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.chaos.faults import FAULT_KINDS

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]
SEEDS = (7, 8)


def test_invariants_hold_under_every_fault(tmp_path: Path) -> None:
    out = tmp_path / "chaos"
    argv = [
        sys.executable, "-m", "bench.chaos.matrix",
        "--seeds", ",".join(str(s) for s in SEEDS),
        "--clients", "3", "--calls", "16", "--inflight", "2",
        "--duration", "19.5", "--workers", "4", "--fault-interval", "3",
        "--wait-timeout", "60", "--drain", "30",
        "--out", str(out),
    ]  # fmt: skip
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=280)
    shown = f"exit {proc.returncode}\n{proc.stdout[-6000:]}\n{proc.stderr[-3000:]}"
    kinds: set[str] = set()
    for seed in SEEDS:
        assert (out / f"seed-{seed}" / "report.json").exists(), shown
        report = json.loads((out / f"seed-{seed}" / "report.json").read_text())
        assert report["violations"] == {
            "lost": 0,
            "duplicates": 0,
            "overlaps": 0,
            "phantoms": 0,
            "unapproved": 0,
            "double_decisions": 0,
            "double_accepts": 0,
            "final_changed": 0,
        }, shown
        assert report["unnoticed_worker_exits"] == 0, shown
        # Everything submitted is accounted for: accepted and final, or rejected with a reason.
        assert report["submitted"] == 48
        assert report["accepted"] + sum(report["rejected"].values()) == report["submitted"], shown
        assert sum(report["completed"].values()) == report["accepted"], shown
        assert report["completed"].get("succeeded", 0) > 0, shown
        # Only the faults explain failures: a non-idempotent call lost with its worker.
        assert set(report["failed_by_error_type"]) <= {"worker_lost"}, shown
        kinds |= set(report["fault_counts"])
    assert proc.returncode == 0, shown
    # Every fault kind was injected while the load ran.
    assert set(FAULT_KINDS) <= kinds, shown
