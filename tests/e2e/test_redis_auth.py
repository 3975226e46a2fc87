"""Redis is never open: ``toolq dev``'s Redis needs its password, ``toolq check`` flags an
open Redis, and the documented ACL users (docs/operations/redis-acls.md) are enough for a
worker, the API and a client."""

from __future__ import annotations

import os
import re
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import redis

from tests.conftest import ROOT, approve_shown
from toolq.cli.stack import EmbeddedRedis, _free_port

pytestmark = pytest.mark.e2e


def _children(pid: int) -> list[int]:
    """Every descendant of ``pid`` (from /proc)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parents[int(entry.name)] = int(fields[1])
    found: list[int] = []
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        kids = [p for p, pp in parents.items() if pp == parent]
        found.extend(kids)
        frontier.extend(kids)
    return found


# Redis, three workers and the API start at once, and `toolq dev` gives the API 30 s to
# answer: beside a second copy of the suite on two cores it did not (as tests/cli's dev test).
@pytest.mark.serial
def test_dev_stack_redis_refuses_unauthenticated_clients(tmp_path):
    # Nothing answers on this port, so `toolq dev` starts its embedded Redis.
    unused = f"redis://127.0.0.1:{_free_port()}/0"
    port = _free_port()
    env = {
        **os.environ,
        "TOOLQ_REDIS_URL": unused,
        "TOOLQ_APP": "tests.apps:registry",
        "PYTHONPATH": str(ROOT),
    }
    log = tmp_path / "dev.log"
    with open(log, "wb") as out:
        dev = subprocess.Popen(
            [sys.executable, "-m", "toolq", "dev", "--pool", "threads", "--port", str(port)],
            env=env,
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 90
        while "Ctrl-C to stop." not in log.read_text():
            assert dev.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        text = log.read_text()
        url = re.search(r"export TOOLQ_REDIS_URL=(\S+)", text)
        assert url, text
        parsed = redis.connection.parse_url(url.group(1))
        password = parsed["password"]
        assert password and len(password) >= 24
        # the attack: connect without the password and read or write anything
        anonymous = redis.Redis(host=parsed["host"], port=parsed["port"])
        with pytest.raises(redis.AuthenticationError):
            anonymous.keys("*")
        with pytest.raises(redis.AuthenticationError):
            anonymous.set("toolq:forged", "1")
        anonymous.close()
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(host=parsed["host"], port=parsed["port"], password="guess").ping()
        owner = redis.Redis.from_url(url.group(1))
        assert owner.exists("toolq:forged") == 0
        assert owner.keys("toolq:worker:*")  # the workers got in with the password
        directory = owner.config_get("dir")["dir"]
        owner.close()
        # redis-server reads the password from a config file only its owner can read
        config = Path(directory) / "redis.conf"
        assert stat.S_IMODE(config.stat().st_mode) == 0o600
        health = httpx.get(f"http://127.0.0.1:{port}/healthz").json()
        assert health["status"] == "ok", health
        # the password reaches workers and the API through the environment, never argv
        seen = 0
        for pid in _children(dev.pid):
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            assert password not in argv, argv
            seen += "toolq" in argv
        assert seen >= 4  # three workers and the API (and their pool processes)
    finally:
        dev.send_signal(signal.SIGTERM)  # `toolq dev` stops its workers, API and Redis
        try:
            dev.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(dev.pid, signal.SIGKILL)
            dev.wait(5)


def run_check(url: str, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TOOLQ_REDIS_URL": url, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "toolq", "check", "--risk", "", *extra],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_check_flags_an_open_redis(settings):
    server = EmbeddedRedis()  # a private Redis with no password
    server.start()
    try:
        flagged = run_check(server.url)
        assert flagged.returncode == 1
        assert "accepts unauthenticated connections" in flagged.stderr
        # an open Redis hides no other finding (a drill's on-call person missed one so)
        both = run_check(server.url, "--risk", "safe")
        assert both.returncode == 1 and "open Redis" in both.stderr
        assert "no live worker consumes toolq.safe" in both.stderr, both.stderr
        allowed = run_check(server.url, "--allow-open-redis")
        assert allowed.returncode == 0 and "accepts unauthenticated" in allowed.stderr
    finally:
        server.stop()
    closed = run_check(settings.redis_url)  # the suite's own, password-protected
    assert closed.returncode == 0 and closed.stdout.strip() == "ok", closed.stderr
    assert "unauthenticated" not in closed.stderr
    # a wrong password is refused (its own message), which never shows the password
    wrong = settings.redis_url.replace("://:", "://:wrong-secret-", 1)
    refused = run_check(wrong)
    assert refused.returncode == 1 and "wrong-secret" not in refused.stderr + refused.stdout


ACL_EXAMPLE = ROOT / "redis-users.conf.example"


def _stop(worker: subprocess.Popen[bytes]) -> None:
    """Warm shutdown of a worker started in its own session; SIGKILL if it hangs."""
    if worker.poll() is not None:
        return
    os.killpg(worker.pid, signal.SIGTERM)
    try:
        worker.wait(20)
    except subprocess.TimeoutExpired:
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait(5)


def test_documented_acl_users_run_a_worker_the_api_and_a_client(tmp_path):
    """The documented ACL users (redis-users.conf.example) are enough, and nothing is denied."""
    import json
    import secrets
    import tempfile

    from tests.apps import registry
    from tests.e2e.test_api_hardening import ADMIN, toolq_api
    from toolq import Client, Settings

    passwords = {role: secrets.token_urlsafe(16) for role in ("worker", "api", "client")}
    users = ACL_EXAMPLE.read_text()
    for role, password in passwords.items():
        users = users.replace(f">CHANGE-ME-{role}", f">{password}")
    assert ">CHANGE-ME" not in users
    admin_password = secrets.token_urlsafe(16)
    server = EmbeddedRedis()
    config = Path(server.dir) / "redis.conf"
    config.write_text(f"{users}\nuser test-admin on >{admin_password} ~* &* +@all\n")
    config.chmod(0o600)
    proc = subprocess.Popen(
        [
            server.binary,
            str(config),
            "--port",
            str(server.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            server.dir,
        ],
        stdout=subprocess.DEVNULL,
    )
    server.process = proc

    def url(user: str, password: str) -> str:
        return f"redis://{user}:{password}@127.0.0.1:{server.port}/0"

    admin = redis.Redis.from_url(url("test-admin", admin_password))
    deadline = time.monotonic() + 10
    while True:
        try:
            admin.ping()
            break
        except redis.ConnectionError:
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
    worker_url, api_url, client_url = (url(f"toolq-{r}", passwords[r]) for r in passwords)
    env = {
        **os.environ,
        "TOOLQ_APP": "tests.apps:registry",
        "PYTHONPATH": str(ROOT),
        "TOOLQ_SWEEP_INTERVAL": "0.2",
        "TOOLQ_HEARTBEAT_SECONDS": "0.5",
        "TOOLQ_LEASE_SECONDS": "2",
    }
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "toolq",
            "worker",
            "--risk",
            "safe,moderate,dangerous",
            "--pool",
            "threads",
            "--concurrency",
            "2",
            "--loglevel",
            "warning",
        ],
        env={**env, "TOOLQ_REDIS_URL": worker_url},
        cwd=ROOT,
        start_new_session=True,
    )
    client = Client(registry, Settings(redis_url=client_url, app="tests.apps:registry"))
    try:
        check = subprocess.run(
            [sys.executable, "-m", "toolq", "check"],
            env={**env, "TOOLQ_REDIS_URL": worker_url},
            capture_output=True,
            text=True,
            timeout=60,
        )
        deadline = time.monotonic() + 30
        while check.returncode != 0:
            denials = [(e["username"], e["reason"], e["object"]) for e in admin.acl_log()]
            assert time.monotonic() < deadline, (check.stderr, denials)
            time.sleep(0.5)
            check = subprocess.run(
                [sys.executable, "-m", "toolq", "check"],
                env={**env, "TOOLQ_REDIS_URL": worker_url},
                capture_output=True,
                text=True,
                timeout=60,
            )
        api_settings = Settings(redis_url=api_url)
        with toolq_api(api_settings, tmp_path / "api.log") as base:
            auth = {"Authorization": f"Bearer {ADMIN}"}
            target = Path(tempfile.mkdtemp(dir=tmp_path)) / "f.txt"
            target.write_text("old")
            batch = client.dispatch(
                [
                    {"id": "e", "name": "echo", "arguments": {"text": "x"}},
                    {"id": "a", "name": "add", "arguments": {"a": 1, "b": 2}},
                    {"id": "c", "name": "countdown", "arguments": {"n": 2}},
                    {
                        "id": "f",
                        "name": "edit_file",
                        "arguments": {"path": str(target), "content": "new"},
                    },
                    {"id": "h", "name": "hurry", "arguments": {}},
                ],
                run_id="acl",
                principal="agent",
            )
            echo, add, count, edit, hurry = batch.call_ids
            ticket = httpx.post(f"{base}/v1/runs/acl/events/ticket", headers=auth).json()
            with httpx.stream(
                "GET", f"{base}/v1/runs/acl/events", params={"ticket": ticket["ticket"]}, timeout=20
            ) as stream:
                assert any(line.startswith("id: ") for line in stream.iter_lines())
            approved = approve_shown(base, edit, auth)
            assert approved.status_code == 200, approved.text
            results = {r.call_id: r for r in client.wait(batch.call_ids, timeout=60, run_id="acl")}
            assert results[echo].output == {"text": "x"} and results[add].output == 3
            assert results[count].status.value == "succeeded"
            assert results[edit].status.value == "succeeded" and target.read_text() == "new"
            assert results[hurry].status.value == "expired"  # the workers' sweeper
            shown = httpx.get(f"{base}/v1/calls/{edit}/undo", headers=auth).json()
            undone = httpx.post(
                f"{base}/v1/calls/{edit}/undo",
                headers=auth,
                timeout=30,
                json={"undo_digest": shown["undo_digest"]},
            )
            assert undone.status_code == 200 and target.read_text() == "old"
            via_api = httpx.post(
                f"{base}/v1/runs/acl2/calls",
                headers=auth,
                json=[{"id": "w", "name": "wipe", "arguments": {"target": "t"}}],
            ).json()["calls"][0]["call_id"]
            assert (
                httpx.post(f"{base}/v1/calls/{via_api}/cancel", headers=auth).json()["status"]
                == "cancelled"
            )
            for path in ("/v1/overview", "/metrics", "/v1/approvals", "/v1/runs/acl/messages"):
                assert httpx.get(f"{base}{path}", headers=auth).status_code == 200, path
            assert next(e.type.value for e in client.events("acl")) == "call.queued"
            client.approvals.pending(run_id="acl")
        # A warm shutdown too: kombu unsubscribes from the pidbox and drops its binding.
        _stop(worker)
        assert worker.returncode == 0
        denied = admin.acl_log()
        assert denied == [], json.dumps(denied, default=str, indent=1)
        # and each user is held to its job: events wake readers through XREAD, so only
        # the worker (Celery's remote control and worker events) may use pub/sub
        as_worker = redis.Redis.from_url(worker_url)
        as_api = redis.Redis.from_url(api_url)
        as_client = redis.Redis.from_url(client_url)
        for attempt in (
            lambda: as_worker.flushall(),
            lambda: as_worker.config_get("*"),
            lambda: as_worker.get("other-app:secret"),
            lambda: as_worker.publish("toolq:run:acl:wake", "1"),
            lambda: as_client.keys("*"),
            lambda: as_client.hgetall("unacked"),
            lambda: as_client.brpop(["toolq.safe"], 1),
            lambda: as_client.publish("toolq:run:acl:wake", "1"),
            lambda: as_client.execute_command("SUBSCRIBE", "toolq:run:acl:wake"),
            lambda: as_api.publish("/0.celery.pidbox", "1"),
            lambda: as_api.execute_command("PSUBSCRIBE", "toolq:run:*:wake"),
        ):
            with pytest.raises(redis.exceptions.NoPermissionError):
                attempt()
        for user in (as_worker, as_api, as_client):
            user.close()
    finally:
        client.close()
        _stop(worker)
        admin.close()
        server.stop()
