"""A full Redis (maxmemory reached, policy noeviction) stops nothing.

A dedicated, password-protected ``redis-server`` is filled to its ``maxmemory``: dispatches
are refused at once with ``store_unavailable`` (Python and HTTP: 503 + Retry-After) and
leave nothing behind; real ``toolq worker`` processes stay up, and once Redis takes writes
again every accepted call becomes final, the one running when Redis filled included.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis

from tests.conftest import Workers, approve_shown, make_settings, serve
from tests.e2e.test_api_hardening import TOKENS, h
from toolq import AsyncClient, CallStatus, Client
from toolq.api.app import create_app
from toolq.cli.stack import EmbeddedRedis
from toolq.errors import StoreUnavailableError
from toolq.keys import Keys
from toolq.signing import generate_pair

pytestmark = pytest.mark.e2e


@pytest.fixture
def full_redis(tmp_path: Path) -> Iterator[EmbeddedRedis]:
    """A private Redis with a password and ``noeviction``, stopped (by its PID) at teardown."""
    server = EmbeddedRedis(password=secrets.token_urlsafe(16), directory=str(tmp_path))
    server.start()
    yield server
    server.stop()


def fill(client: redis.Redis) -> None:
    """Write until Redis refuses (its ``maxmemory`` a few MB above what it holds).

    ``maxmemory`` then drops just below what Redis holds, so a client's freed buffer cannot
    let one write slip in: every write is refused until ``maxmemory`` is raised.
    """
    client.config_set("maxmemory", client.info("memory")["used_memory"] + 2_000_000)
    blob = b"x" * 50_000
    with pytest.raises(redis.exceptions.OutOfMemoryError):
        for i in range(1000):
            client.set(f"fill:{i}", blob)
    client.config_set("maxmemory", client.info("memory")["used_memory"] - 200_000)
    with pytest.raises(redis.exceptions.OutOfMemoryError):
        client.set("fill:probe", "x")


def wait_until(predicate, timeout: float, message: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, message
        time.sleep(0.1)


def test_a_full_redis_refuses_dispatches_and_stops_no_worker(full_redis, tmp_path):
    from tests.apps import registry

    # Leases and heartbeats longer than the suite's: a loaded machine must not let one
    # lapse between two renewals (a full Redis renews both).
    settings = make_settings(redis_url=full_redis.url, lease_seconds=6.0, heartbeat_seconds=2.0)
    keys = Keys(settings.key_prefix)
    admin = redis.Redis.from_url(full_redis.url)
    workers = Workers(settings)
    client = Client(registry, settings)
    try:
        fleet = [workers.start(concurrency=2, log=tmp_path / "worker.log")]
        # One call running when Redis fills (its handler ends during the outage), more queued.
        running = client.dispatch(
            [{"id": "r", "name": "slow", "arguments": {"seconds": 1.5}}], run_id="before"
        )
        # running, and past its own write to Redis (tests.apps' ``record``)
        wait_until(
            lambda: admin.llen(f"test:exec:{running.call_ids[0]}") == 1,
            20,
            "the slow call did not start",
        )
        parked = client.dispatch(
            [{"id": "w", "name": "wipe", "arguments": {"target": "t"}}],
            run_id="parked",
            principal="agent",
        )
        fill(admin)
        refused_at = time.monotonic()

        # The Python clients: refused at once, with the code and why.
        keys_before = set(admin.keys("toolq*"))
        with pytest.raises(StoreUnavailableError) as caught:
            client.dispatch(
                [{"id": f"e{i}", "name": "echo", "arguments": {"text": "x"}} for i in range(3)],
                run_id="oom-1",
            )
        assert caught.value.code == "store_unavailable"
        assert caught.value.details["reason"] == "full"
        assert "full" in caught.value.message and full_redis.password not in caught.value.message

        async def dispatch_async() -> None:
            async with AsyncClient(registry, settings) as aclient:
                await aclient.dispatch(
                    [{"id": "a", "name": "echo", "arguments": {"text": "x"}}], run_id="oom-2"
                )

        with pytest.raises(StoreUnavailableError):
            asyncio.run(dispatch_async())
        # Nothing half-written: no record, run, idempotency claim, queue or message.
        assert not admin.exists(keys.run_calls("oom-1"), keys.run_calls("oom-2"))
        assert set(admin.keys("toolq*")) <= keys_before
        assert not admin.llen(keys.queue_for("safe"))

        # Over HTTP: 503, Retry-After, the JSON error body.
        for url in serve(create_app(settings, registry, tokens=TOKENS)):
            answer = httpx.post(
                f"{url}/v1/runs/oom-3/calls",
                headers=h("agent-t"),
                json=[{"id": "e", "name": "echo", "arguments": {"text": "x"}}],
                timeout=30,
            )
            assert answer.status_code == 503, answer.text
            assert int(answer.headers["retry-after"]) > 0
            error = answer.json()["error"]
            assert error["code"] == "store_unavailable" and error["reason"] == "full"
            decided = approve_shown(url, parked.call_ids[0], h("alice-t"))
            assert decided.status_code == 503, decided.text
            assert decided.json()["error"]["code"] == "store_unavailable"
            # named as a dispatch's refusal names it (without the password)
            assert "Redis at redis://:***@127.0.0.1:" in decided.json()["error"]["message"]
            assert full_redis.password not in decided.text
            assert "retry-after" in decided.headers
        assert not admin.exists(keys.run_calls("oom-3"))
        assert set(admin.keys("toolq*")) <= keys_before

        # A worker started while Redis is full starts, and waits too.
        late = workers.start(concurrency=1, wait=False, log=tmp_path / "late.log")
        fleet.append(late)
        time.sleep(max(0.0, 6 - (time.monotonic() - refused_at)))
        for n, proc in enumerate(fleet):
            logs = "\n".join(p.read_text()[-2000:] for p in tmp_path.glob("*.log"))
            assert proc.poll() is None, f"worker {n} exited ({proc.returncode}):\n{logs}"
        assert client.result(running.call_ids[0]).status is CallStatus.RUNNING
        # the first worker is still seen alive: its heartbeat's TTL is extended
        assert len(list(admin.scan_iter(match=keys.worker("*")))) == 1

        admin.config_set("maxmemory", 0)  # Redis takes writes again
        done = running.wait(timeout=30)[0]
        assert done.status is CallStatus.SUCCEEDED, (done.status, done.error)
        assert done.output == "slept"
        after = client.dispatch(
            [{"id": f"z{i}", "name": "echo", "arguments": {"text": "z"}} for i in range(6)],
            run_id="after",
        )
        assert all(r.status is CallStatus.SUCCEEDED for r in after.wait(timeout=30))
        assert all(proc.poll() is None for proc in fleet)
        # every worker, the late one included, announced itself again
        wait_until(lambda: len(list(admin.scan_iter(match=keys.worker("*")))) == 2, 20,
                   "a worker stopped heartbeating")  # fmt: skip
    finally:
        client.close()
        admin.config_set("maxmemory", 0)
        workers.stop_all()
        admin.close()


def test_cli_says_what_is_wrong_with_redis_in_one_line(full_redis):
    from tests.cli.test_first_hour import toolq

    payload = '[{"id": "c1", "name": "echo", "arguments": {"text": "hi"}}]'
    wrong = full_redis.url.replace(f":{full_redis.password}@", ":not-the-password@")
    missing = full_redis.url.replace(f":{full_redis.password}@", "")
    every = (
        ("dispatch", "--app", "tests.apps:registry"),
        ("approvals", "list"),
        ("check",),
        ("tail", "some-run"),
    )
    for url, commands in ((wrong, every), (missing, every[2:3])):
        for args in commands:
            done = toolq(*args, redis_url=url, stdin=payload, timeout=60)
            lines = done.stderr.strip().splitlines()
            assert done.returncode == 1, (args, done.stderr)
            assert len(lines) == 1 and "Traceback" not in done.stderr, (args, done.stderr)
            assert "refused toolq's credentials" in lines[0], (args, lines)
            assert "does not answer" not in lines[0]
            assert "not-the-password" not in done.stderr + done.stdout

    admin = redis.Redis.from_url(full_redis.url)
    try:
        fill(admin)
        done = toolq(
            "dispatch", "--app", "tests.apps:registry", redis_url=full_redis.url, stdin=payload
        )
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 1 and len(lines) == 1, done.stderr
        assert "Traceback" not in done.stderr
        assert "is full" in lines[0] and "maxmemory" in lines[0], lines
        assert full_redis.password not in done.stderr
    finally:
        admin.config_set("maxmemory", 0)
        admin.close()


def test_a_full_redis_makes_approvals_approve_one_line(full_redis):
    """``toolq approvals approve`` on a full Redis: one line with the code, no traceback."""
    from tests.apps import registry
    from tests.cli.test_first_hour import toolq

    settings = make_settings(redis_url=full_redis.url)
    admin = redis.Redis.from_url(full_redis.url)
    client = Client(registry, settings)
    signing = generate_pair()[0]
    try:
        parked = client.dispatch(
            [{"id": "w", "name": "wipe", "arguments": {"target": "t"}}], run_id="park"
        )
        assert parked.results()[0].status is CallStatus.AWAITING_APPROVAL
        fill(admin)
        # --unsigned: no worker verifies approvals here, and without it the CLI refuses
        # before it writes (it has no signing key)
        digest = client.approvals.get(parked.call_ids[0]).digest
        for decision in (("approve", "--unsigned", "--digest", digest), ("deny", "--reason", "no")):
            done = toolq(
                "approvals", *decision, parked.call_ids[0], "--by", "alice",
                "--app", "tests.apps:registry",
                redis_url=full_redis.url, timeout=60, TOOLQ_APPROVAL_SIGNING_KEY=signing,
            )  # fmt: skip
            errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
            assert done.returncode != 0, done.stderr
            assert len(errors) == 1 and "Traceback" not in done.stderr, done.stderr
            assert "is full" in errors[0] and "store_unavailable" in errors[0], errors
        listed = toolq("approvals", "list", redis_url=full_redis.url, timeout=60)
        assert listed.returncode == 0, listed.stderr  # reading still works
        assert parked.call_ids[0][:8] in listed.stdout
    finally:
        client.close()
        admin.config_set("maxmemory", 0)
        admin.close()


def test_a_worker_on_a_read_only_replica_stays_up_until_promoted(full_redis, tmp_path):
    """A worker pointed at a read-only replica waits (kombu's BRPOP is refused) and runs
    calls once the replica is promoted."""
    from tests.apps import registry

    replica = EmbeddedRedis(password=full_redis.password)
    replica.start()
    admin = redis.Redis.from_url(replica.url)
    settings = make_settings(redis_url=replica.url)
    workers = Workers(settings)
    try:
        admin.config_set("masterauth", full_redis.password or "")
        admin.replicaof("127.0.0.1", full_redis.port)
        wait_until(
            lambda: admin.info("replication").get("master_link_status") == "up",
            20,
            "the replica did not sync",
        )
        worker = workers.start(concurrency=1, wait=False, log=tmp_path / "worker.log")
        wait_until(
            lambda: "maintenance paused" in (tmp_path / "worker.log").read_text(),
            60,
            "the worker never reached Redis",
        )
        time.sleep(4)
        assert worker.poll() is None, (tmp_path / "worker.log").read_text()[-3000:]
        assert "read-only replica" in (tmp_path / "worker.log").read_text()
        admin.replicaof("NO", "ONE")
        with Client(registry, settings) as client:
            batch = client.dispatch([{"id": "x", "name": "echo", "arguments": {"text": "x"}}])
            assert batch.wait(timeout=60)[0].status is CallStatus.SUCCEEDED
        assert worker.poll() is None
    finally:
        workers.stop_all()
        admin.close()
        replica.stop()
