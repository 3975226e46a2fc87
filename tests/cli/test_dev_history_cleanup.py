"""``toolq dev`` leaves no temporary history directory behind when its stack never starts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_dev_that_cannot_start_leaves_no_history_directory(tmp_path):
    environ = {
        **{k: v for k, v in os.environ.items() if k != "TOOLQ_HISTORY_URL"},
        "PYTHONPATH": str(ROOT),
        "TMPDIR": str(tmp_path),
        "TOOLQ_REDIS_URL": "redis://127.0.0.1:1/0",
    }
    done = subprocess.run(
        [
            *(sys.executable, "-m", "toolq", "dev", "--app", "tests.apps:registry"),
            *("--redis-url", "redis://127.0.0.1:1/0", "--no-api"),
        ],
        env=environ,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    # nothing was archived there: the directory made for it is not left behind, unnamed
    assert not list(tmp_path.glob("toolq-history-*")), list(tmp_path.iterdir())
