"""The history store under faults: archivers killed mid-batch, PostgreSQL restarted.

Runs ``python -m bench.chaos.harness --history postgresql`` in a subprocess: its own Redis,
its own PostgreSQL cluster (``initdb`` in a temporary directory, free port), workers that
archive, a standalone ``toolq history archive``, clients and the approver, with the faults
``archiver-kill9`` (kill -9 a process whose archiver holds an unacknowledged batch, when one
is caught) and ``sql-restart`` (PostgreSQL stopped for 2 s, then started again), plus worker
``kill9``. After a final drain of the archive stream, every call final in Redis and every
final result a client saw must be in SQL exactly once with the same status.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.chaos.postgres import binaries

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(binaries() is None, reason="PostgreSQL binaries not installed")
def test_history_holds_every_final_call_once_under_archiver_and_sql_faults(
    tmp_path: Path,
) -> None:
    out = tmp_path / "chaos"
    argv = [
        sys.executable, "-m", "bench.chaos.harness",
        "--clients", "3", "--calls", "16", "--inflight", "2",
        "--duration", "24", "--workers", "3", "--fault-interval", "3",
        "--faults", "archiver-kill9,sql-restart,kill9",
        "--history", "postgresql", "--seed", "11",
        "--wait-timeout", "60", "--drain", "40",
        "--out", str(out),
    ]  # fmt: skip
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=220)
    shown = f"exit {proc.returncode}\n{proc.stdout[-6000:]}\n{proc.stderr[-3000:]}"
    assert (out / "report.json").exists(), shown
    report = json.loads((out / "report.json").read_text())
    assert not any(report["violations"].values()), shown
    store = report["history_store"]
    assert store is not None, shown
    assert store["violations"] == {
        "history_lost": 0,
        "history_duplicates": 0,
        "history_status": 0,
        "history_phantoms": 0,
    }, shown
    # The drain emptied the archive stream, and SQL holds every call the clients submitted.
    assert store["drain"]["left"] == 0 and store["drain"]["pending"] == 0, shown
    assert report["submitted"] == 48, shown
    assert store["final_in_redis"] == report["accepted"] == store["rows"], shown
    assert store["client_seen_final"] > 0, shown
    assert store["events_missing"] == 0 and store["events_extra"] == 0, shown
    # Both history faults happened while the load ran.
    assert store["faults"].get("archiver-kill9", 0) >= 2, shown
    assert store["faults"].get("sql-restart", 0) >= 2, shown
    # No archiver or worker died of a database outage (a standalone archiver used to exit 1).
    assert report["unexpected_worker_exits"] == [], shown
    assert proc.returncode == 0, shown
