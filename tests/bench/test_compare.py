"""``python -m bench.compare --quick`` end to end, raw Celery and toolq, on a database of its own.

Runs the script in a subprocess against the suite's Redis server on database 11 (13 is the
suite's), with tiny sizes; every section must be measured and written to the JSON file, and
no worker may be left connected afterwards. dramatiq and arq are left to the full run: arq
needs a virtualenv of its own and dramatiq is not in the ``test`` extra.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import redis

from tests import conftest

# The run took 168 s of its 170 beside a second copy of the suite on two loaded cores (about
# 50 s on a quiet machine): it gets the room test_speed.py's run has.
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]


def bench_url() -> str:
    """The suite's Redis server (as conftest found or started it), database 11."""
    return conftest.REDIS_URL.rsplit("/", 1)[0] + "/11"


def positive(summary: dict[str, Any], n: int) -> None:
    assert summary["n"] == n
    assert 0 < summary["min_ms"] <= summary["p50_ms"] <= summary["p99_ms"] <= summary["max_ms"]


def test_quick_compare_measures_every_section(tmp_path: Path) -> None:
    out = tmp_path / "compare.json"
    argv = [
        sys.executable, "-m", "bench.compare", "--quick", "--systems", "celery,toolq",
        "--calls", "10", "--batch", "100", "--approvals", "5", "--events", "20",
        "--sizes", "10,100", "--processes", "1,2",
        "--redis-url", bench_url(), "--json", str(out), "--logs", str(tmp_path / "logs"),
    ]  # fmt: skip
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=280)
    shown = f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr[-3000:]}"
    assert proc.returncode == 0, shown
    report = json.loads(out.read_text())
    assert report["not_measured"] == {}, shown

    roundtrip = report["roundtrip"]
    assert set(roundtrip["systems"]) == {"raw celery", "toolq"}
    for figures in roundtrip["systems"].values():
        assert figures["calls"] == 10 and figures["batch"] == 100
        assert 0 < figures["p50_ms"] <= figures["p99_ms"]
        assert figures["batch_total_s"] > 0 and figures["batch_calls_per_s"] > 0
    ratios = roundtrip["toolq_over"]["raw celery"]
    assert set(ratios) == {"p50", "p99", "mean", "batch_time", "calls_per_s"}
    assert all(value > 0 for value in ratios.values())

    approval = report["approval"]
    for span in approval.values():
        positive(span, 5)
    # The reader gets call.started after the worker wrote it.
    assert (
        approval["decision_to_started"]["p50_ms"]
        < approval["decision_to_reader_has_started"]["p50_ms"]
    )

    for mode in ("paced", "burst"):
        positive(report["events"][mode]["produced_to_reader"], 20)
        positive(report["events"][mode]["written_to_reader"], 20)

    by_size = report["scaling"]["by_size"]
    assert [p["calls"] for p in by_size["systems"]["toolq"]] == [10, 100]
    assert [p["calls"] for p in by_size["systems"]["raw celery"]] == [10, 100]
    assert len(by_size["toolq_over_celery_time"]) == 2
    by_processes = report["scaling"]["by_processes"]
    assert [p["processes"] for p in by_processes["systems"]["toolq"]] == [1, 2]
    for points in (*by_size["systems"].values(), *by_processes["systems"].values()):
        assert all(p["seconds"] > 0 and p["calls_per_s"] > 0 for p in points)
    assert all(r > 0 for r in by_processes["toolq_over_celery_time"])

    for title in ("Round trip", "Approval decision", "Event delivery", "by batch size"):
        assert title in proc.stdout, shown
    assert "toolq /" in proc.stdout

    # Every worker stopped: nothing is connected to the bench database any more, and it
    # was flushed.
    client = redis.Redis.from_url(bench_url())
    try:
        me = client.client_id()
        others = [c for c in client.client_list() if c["db"] == "11" and int(c["id"]) != me]
        assert others == [], others
        assert client.dbsize() == 0
    finally:
        client.close()
