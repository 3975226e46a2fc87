"""What the framework tests share: the workers' execution records and a second process."""

from __future__ import annotations

import os
import subprocess
import sys

import redis

from tests.conftest import ROOT, SECRETS_KEY
from toolq import Settings


def executions(r: redis.Redis, call_id: str) -> list[str]:
    """What the workers recorded for a call (``pid:tag`` per execution)."""
    return [x.decode() for x in r.lrange(f"test:exec:{call_id}", 0, -1)]


def child_env(settings: Settings) -> dict[str, str]:
    return {
        **os.environ,
        "TOOLQ_REDIS_URL": settings.redis_url,
        "TOOLQ_SECRETS_KEY": SECRETS_KEY,
        "PYTHONPATH": str(ROOT),
    }


def run_child(module: str, settings: Settings, *args: str) -> str:
    """Run ``python -m module args`` as a separate process; its stdout (it must exit 0)."""
    done = subprocess.run(
        [sys.executable, "-m", module, *args],
        env=child_env(settings),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout
