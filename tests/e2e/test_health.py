"""``/healthz``, ``toolq check`` and the dashboard tell why toolq is unhealthy, with the fix.

Each problem is provoked for real: a private ``redis-server`` filled past its maxmemory
(OOM) or made a replica (READONLY), a ``toolq worker`` process SIGKILLed (lost), a queue
without a worker.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import redis

from tests.conftest import ROOT, SECRETS_KEY, InProcess, Workers, make_settings, serve
from tests.e2e.test_dashboard import browse, expect, sign_in
from toolq.api.app import create_app
from toolq.cli.stack import EmbeddedRedis, _free_port
from toolq.keys import Keys
from toolq.settings import ApiToken, Settings

pytestmark = pytest.mark.e2e

TOKENS = {"admin-t": ApiToken(principal="root", roles=["admin"])}


def checks(api: str) -> tuple[int, str, dict[str, dict[str, Any]]]:
    got = httpx.get(f"{api}/healthz", timeout=10)
    body = got.json()
    return got.status_code, body["status"], {c["name"]: c for c in body["checks"]}


def check_cli(url: str, risk: str = "safe") -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "TOOLQ_REDIS_URL": url,
        "PYTHONPATH": str(ROOT),
        "TOOLQ_SECRETS_KEY": SECRETS_KEY,
    }
    return subprocess.run([sys.executable, "-m", "toolq", "check", "--risk", risk,
                           "--allow-open-redis"], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=60)  # fmt: skip


@pytest.fixture
def private_redis() -> Iterator[EmbeddedRedis]:
    server = EmbeddedRedis()
    server.start()
    yield server
    server.stop()


def test_healthz_and_check_report_a_redis_that_refuses_writes(
    private_redis: EmbeddedRedis,
) -> None:
    from tests.apps import registry

    raw = redis.Redis.from_url(private_redis.url)
    settings = make_settings(redis_url=private_redis.url)
    for api in serve(create_app(settings, registry, tokens=TOKENS)):
        code, status, found = checks(api)
        assert (code, status) == (200, "degraded")  # no worker yet: reads still served
        assert found["redis_writes"] == {"name": "redis_writes", "ok": True}
        for risk in ("safe", "moderate", "dangerous"):
            assert found[f"workers:toolq.{risk}"]["code"] == "no_worker"
            assert f"toolq worker --risk {risk}" in found[f"workers:toolq.{risk}"]["fix"]

        # Filled past its maxmemory: a PING still answers, every write is refused.
        for i in range(32):
            raw.set(f"fill:{i}", b"x" * 64 * 1024)
        used = int(raw.info("memory")["used_memory"])
        limit = used - 1024 * 1024
        raw.config_set("maxmemory-policy", "noeviction")
        raw.config_set("maxmemory", str(limit))
        with pytest.raises(redis.exceptions.OutOfMemoryError):
            raw.set("one-more", "x")
        assert raw.ping()
        code, status, found = checks(api)
        assert (code, status) == (200, "degraded")
        full = found["redis_writes"]
        assert full["ok"] is False and full["code"] == "redis_oom", full
        assert "out of memory" in full["reason"] and "maxmemory" in full["fix"]

        metrics = httpx.get(f"{api}/metrics", headers={"Authorization": "Bearer admin-t"})
        assert metrics.status_code == 200, metrics.text
        figures = dict(re.findall(r"^(toolq_redis_memory_\w+) (\d+)$", metrics.text, re.M))
        assert int(figures["toolq_redis_memory_max_bytes"]) == limit
        assert int(figures["toolq_redis_memory_used_bytes"]) > limit

        cli = check_cli(private_redis.url)
        assert cli.returncode == 1, cli
        assert "unhealthy: Redis is out of memory" in cli.stderr and "maxmemory" in cli.stderr

        # Nearly full: the probe's small write passes, a dispatch may not. It says so.
        raw.config_set("maxmemory", str(int(int(raw.info("memory")["used_memory"]) / 0.965)))
        code, status, found = checks(api)
        assert (code, status) == (200, "degraded") and found["redis_writes"]["ok"] is True
        near = found["redis_memory"]
        assert near["ok"] is False and near["code"] == "redis_nearly_full", near
        cli = check_cli(private_redis.url)
        # a warning (Redis still takes writes); the exit status is the missing workers'
        assert "warning: Redis at" in cli.stderr and "of its maxmemory" in cli.stderr, cli
        assert "unhealthy: Redis" not in cli.stderr, cli

        raw.config_set("maxmemory", "0")
        assert checks(api)[2]["redis_writes"]["ok"] is True

        raw.replicaof("127.0.0.1", str(_free_port()))  # a replica of nothing: read-only
        try:
            readonly = checks(api)[2]["redis_writes"]
            assert readonly["code"] == "redis_readonly" and "master" in readonly["fix"]
        finally:
            raw.replicaof("NO", "ONE")
    raw.close()


def test_healthz_is_503_only_when_redis_does_not_answer() -> None:
    from tests.apps import registry

    settings = make_settings(redis_url=f"redis://127.0.0.1:{_free_port()}/0")
    for api in serve(create_app(settings, registry)):
        got = httpx.get(f"{api}/healthz", timeout=10)
        assert got.status_code == 503
        body = got.json()
        assert body["status"] == "unhealthy" and body["code"] == "redis_unavailable"
        assert body["checks"][0]["name"] == "redis" and body["checks"][0]["fix"]
        gated = httpx.get(f"{api}/v1/tools", timeout=10)  # the gate answers before auth
        assert gated.status_code == 503 and gated.headers["retry-after"] == "5"
        assert gated.headers["content-type"] == "application/json"
        assert gated.json()["error"]["code"] == "redis_unavailable"


def test_a_sigkilled_worker_is_reported_lost_and_a_stopped_one_is_not(
    settings: Settings, workers: Workers, inproc: InProcess, r: redis.Redis,
    wait_for: Callable[..., None],
) -> None:  # fmt: skip
    from tests.apps import registry

    proc = workers.start("safe")
    stopped = inproc.start("moderate,dangerous")
    keys = Keys(settings.key_prefix)
    for api in serve(create_app(settings, registry, tokens=TOKENS)):
        code, status, found = checks(api)
        assert (code, status) == (200, "ok"), found
        assert set(found) == {
            "redis_writes", "redis_memory", "workers:toolq.safe", "workers:toolq.moderate",
            "workers:toolq.dangerous",
        }  # fmt: skip

        stopped.stop()  # a warm shutdown: not a lost worker
        assert not r.hexists(keys.workers_seen, stopped.hostname)
        workers.kill9(proc)
        wait_for(lambda url=api: "worker_lost" in checks(url)[2], timeout=20,
                 message="the SIGKILLed worker was not reported lost")  # fmt: skip
        code, status, found = checks(api)
        assert (code, status) == (200, "degraded")
        lost = found["worker_lost"]
        assert "toolq.safe" in lost["reason"] and "without a clean shutdown" in lost["reason"]
        assert "runbook" in lost["fix"]
        assert stopped.hostname not in lost["reason"]
        assert found["workers:toolq.safe"]["code"] == "no_worker"

        cli = check_cli(settings.redis_url, "safe")
        assert cli.returncode == 1, cli
        assert "warning: worker" in cli.stderr and "without a clean shutdown" in cli.stderr
        assert "unhealthy: no live worker consumes toolq.safe" in cli.stderr

        for page in browse(api):
            sign_in(page)
            expect(page.locator('[data-testid="health-worker_lost"]')).to_contain_text(
                "worker lost", timeout=20_000
            )
            expect(page.locator('[data-testid="health-no_worker"]').first).to_contain_text(
                "toolq worker --risk", timeout=20_000
            )
