"""``python -m bench.speed --tiny`` end to end: raw Celery and toolq, on a private Redis.

The script starts its own ``redis-server`` (never the suite's); with tiny sizes every asked
section must be measured, the JSON must hold every figure and each speed target a verdict.
dramatiq and arq are left to the full run (dramatiq is not in the ``test`` extra, arq needs
a virtualenv of its own); py-spy's profile too (it is not a dependency).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]


def test_tiny_speed_run_measures_every_section(tmp_path: Path) -> None:
    out = tmp_path / "speed.json"
    argv = [
        sys.executable, "-m", "bench.speed", "--tiny", "--systems", "celery,toolq",
        "--sections", "roundtrip,io,async,scaling,breakdown,fairshare", "--scaling", "1,2",
        "--io-calls", "20", "--json", str(out), "--logs", str(tmp_path / "logs"),
    ]  # fmt: skip
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=280)
    shown = f"exit {proc.returncode}\n{proc.stdout[-6000:]}\n{proc.stderr[-3000:]}"
    assert proc.returncode == 0, shown
    report = json.loads(out.read_text())
    assert report["not_measured"] == {}, shown
    # commandstats counts the commands a script issues: EVAL + its 2 inner commands.
    assert report["options"]["script_probe"] == 3

    rows = {r["key"]: r for r in report["roundtrip"]}
    assert set(rows) == {"celery-prefork", "celery-threads", "toolq-prefork", "toolq-threads"}
    for r in rows.values():
        assert r["calls"] == 10 and r["batch"] == 50
        assert 0 < r["p50_ms"] <= r["p99_ms"]
        assert r["batch_calls_per_s"] > 0
        for phase in ("single", "batched"):
            # Every call costs Redis at least its enqueue, fetch and result.
            assert r[phase]["commands_per_call"] >= 3, r[phase]
            assert r[phase]["redis_cpu_us_per_call"] > 0
    kinds = {k["key"] for k in rows["toolq-prefork"]["keys"]["kinds"]}
    assert "toolq:call:{id}" in kinds and "toolq:run:{id}:events" in kinds

    assert {r["system"] for r in report["io"]} == {"celery", "toolq"}
    for r in report["io"]:
        # 20 calls of 100 ms on 50 slots: never faster than one sleep.
        assert r["calls"] == 20 and r["seconds"] >= 0.1
    assert report["async"]["seconds"] >= 0.1
    assert [p["processes"] for p in report["scaling"] if not p["pinned"]] == [1, 2]
    fair = report["fairshare"]
    assert fair["through_admission"] == {"plain": False, "fair_share": True}
    assert fair["plain_calls_per_s"] > 0 and fair["fair_share_calls_per_s"] > 0
    assert all(p["calls_per_s"] > 0 for p in report["scaling"])

    # MONITOR saw toolq's own scripts, named, and the worker's share of each call.
    ops = {(r["where"], r["op"].lower()) for r in report["breakdown"]["batch"]["rows"]}
    for where, script in (("worker pool", "start"), ("worker pool", "finish"),
                          ("client dispatch", "create")):  # fmt: skip
        assert any(w == where and o.startswith(f"script {script}") for w, o in ops), ops

    verdicts = {t["target"]: t["verdict"] for t in report["targets"]}
    assert any("20 Redis commands" in t for t in verdicts), verdicts
    assert set(verdicts.values()) <= {"PASS", "MISS", "MEASURED"}
    assert any(t.startswith("fair share, one tenant") for t in verdicts), verdicts
    for title in ("No-op calls", "toolq / best peer", "I/O-bound", "Scaling", "Speed targets"):
        assert title in proc.stdout, shown
