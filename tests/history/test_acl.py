"""The documented ACL users (redis-users.conf.example) are enough for the history store."""

from __future__ import annotations

import secrets
import subprocess
import time
from pathlib import Path

import redis

from tests.apps import registry
from tests.conftest import ROOT
from toolq import Client, Settings
from toolq.backend import Backend
from toolq.cli.stack import EmbeddedRedis
from toolq.history.archiver import Archiver
from toolq.keys import Keys
from toolq.workers.health import run_checks

ACL_EXAMPLE = ROOT / "redis-users.conf.example"


def test_the_acl_users_archive_read_and_watch_history_without_a_denial(tmp_path):
    passwords = {role: secrets.token_urlsafe(16) for role in ("worker", "api", "client")}
    users = ACL_EXAMPLE.read_text()
    for role, password in passwords.items():
        users = users.replace(f">CHANGE-ME-{role}", f">{password}")
    admin_password = secrets.token_urlsafe(16)
    server = EmbeddedRedis()
    config = Path(server.dir) / "redis.conf"
    config.write_text(f"{users}\nuser test-admin on >{admin_password} ~* &* +@all\n")
    proc = subprocess.Popen(
        [server.binary, str(config), "--port", str(server.port), "--bind", "127.0.0.1",
         "--save", "", "--appendonly", "no", "--dir", server.dir],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    server.process = proc

    def url(user: str, password: str) -> str:
        return f"redis://{user}:{password}@127.0.0.1:{server.port}/0"

    try:
        admin = redis.Redis.from_url(url("test-admin", admin_password))
        deadline = time.monotonic() + 10
        while True:
            try:
                admin.ping()
                break
            except redis.ConnectionError:
                assert time.monotonic() < deadline and proc.poll() is None
                time.sleep(0.05)
        history_url = f"sqlite:///{tmp_path}/h.db"

        def settings(role: str) -> Settings:
            return Settings(
                redis_url=url(f"toolq-{role}", passwords[role]), history_url=history_url
            )

        with Client(registry, settings("client")) as client:  # creates the archive stream
            batch = client.dispatch(
                [{"id": "x", "name": "no_such_tool", "arguments": {}}], run_id="acl"
            )
        worker = Backend(settings("worker"))
        assert worker.history is not None
        archiver = Archiver(worker.redis, worker.keys, worker.settings, worker.history, "w")
        assert archiver.step(100) == 1
        worker.close()
        api = Backend(settings("api"))
        checks = run_checks(api.redis, Keys(), [], "acl", history_alert=60)
        assert [c.ok for c in checks if c.name == "history_lag"] == [True]
        assert api.redis.xlen(Keys().history_archive) == 0
        assert api.store.result(batch.call_ids[0]).status.value == "failed"
        api.close()
        assert admin.acl_log() == []
    finally:
        proc.terminate()
        proc.wait(10)
