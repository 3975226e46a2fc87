"""A short chaos run: every fault kind at least once under load; the invariants must hold.

Runs ``python -m bench.chaos.harness`` in a subprocess: its own Redis (AOF,
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

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

ROOT = Path(__file__).resolve().parents[2]


def test_invariants_hold_under_every_fault(tmp_path: Path) -> None:
    out = tmp_path / "chaos"
    argv = [
        sys.executable, "-m", "bench.chaos.harness",
        "--clients", "3", "--calls", "24", "--inflight", "2",
        "--duration", "30", "--workers", "4", "--fault-interval", "5",
        "--faults", ",".join(FAULT_KINDS),
        "--seed", "7", "--wait-timeout", "60", "--drain", "30",
        "--out", str(out),
    ]  # fmt: skip
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=220)
    shown = f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr[-3000:]}"
    assert (out / "report.json").exists(), shown
    report = json.loads((out / "report.json").read_text())

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
    assert proc.returncode == 0, shown
    # Every fault kind was injected while the load ran.
    assert set(FAULT_KINDS) <= set(report["fault_counts"]), shown
    # Everything submitted is accounted for: accepted and final, or rejected with a reason.
    assert report["submitted"] == 72
    assert report["accepted"] + sum(report["rejected"].values()) == report["submitted"], shown
    assert sum(report["completed"].values()) == report["accepted"], shown
    assert report["completed"].get("succeeded", 0) > 0, shown
    # Only the faults explain failures: a non-idempotent call lost with its worker.
    assert set(report["failed_by_error_type"]) <= {"worker_lost"}, shown
