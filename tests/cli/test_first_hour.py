"""What a newcomer meets first, through the console script: usage errors, a Redis that is not
there, a port in use, help, ids they copy from listings and the dashboard."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT
from toolq import CallStatus, Client
from toolq.cli.check import live_workers
from toolq.cli.stack import _free_port
from toolq.keys import Keys

pytestmark = pytest.mark.e2e

SCRIPT = Path(sys.executable).parent / "toolq"
"""The installed console script (``python -m toolq`` when the venv has none)."""


def toolq(*args: str, redis_url: str, stdin: str | None = None, timeout: float = 60, **env: str):
    environ = {
        **os.environ,
        "TOOLQ_REDIS_URL": redis_url,
        "PYTHONPATH": str(ROOT),
        "COLUMNS": "80",  # narrow on purpose: ids must not be cut
        **env,
    }
    environ.pop("TOOLQ_APP", None)
    command = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "toolq"]
    started = time.monotonic()
    done = subprocess.run(
        [*command, *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=environ,
        cwd=ROOT,
        timeout=timeout,
    )
    done.elapsed = time.monotonic() - started  # type: ignore[attr-defined]
    return done


def _closed_port() -> int:
    return _free_port()  # nothing listens there once the probe socket is closed


@pytest.mark.parametrize(
    ("args", "valid"),
    [
        (("tools", "--app", "tests.apps:registry", "--format", "bogus"), "openai-responses"),
        (("check", "--risk", "bogus"), "safe, moderate, dangerous"),
        (("worker", "--app", "tests.apps:registry", "--risk", "bogus"), "safe, moderate"),
        (("worker", "--app", "tests.apps:registry", "--pool", "bogus"), "prefork, threads, solo"),
        (("tail", "R", "--after", "garbage"), "<ms>-<seq>"),
        (("approvals", "list", "--risk", "bogus"), "safe, moderate, dangerous"),
        (("dispatch", "--messages", "bogus"), "anthropic"),
        (("api", "--log-level", "loud"), "debug, info, warning"),
    ],
)
def test_bad_option_values_are_usage_errors_listing_the_valid_ones(args, valid):
    done = toolq(*args, redis_url=f"redis://127.0.0.1:{_closed_port()}/0")
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert "Invalid value" in done.stderr
    assert valid in " ".join(done.stderr.replace("│", " ").split())


def test_redis_unreachable_is_one_line_naming_the_url_without_its_password():
    url = f"redis://:hunter2@127.0.0.1:{_closed_port()}/0"
    payload = json.dumps([{"id": "c1", "name": "echo", "arguments": {"text": "hi"}}])
    commands = [
        ("dispatch", "--app", "tests.apps:registry"),
        ("tail", "some-run"),
        ("approvals", "list"),
        ("approvals", "show", "abcdef12"),
        ("check",),
    ]
    # Python start-up (the imports a loaded machine slows down) measured here, without Redis:
    # each command's own `--help` (which imports its module, as running it does) before the
    # commands, and `tools` after them; the slowest of those.
    helps = [toolq(name, "--help", redis_url=url) for name in dict.fromkeys(a[0] for a in commands)]
    assert all(done.returncode == 0 for done in helps), [done.stderr for done in helps]
    startup = max(done.elapsed for done in helps)
    elapsed: dict[tuple[str, ...], float] = {}
    for args in commands:
        done = toolq(*args, redis_url=url, stdin=payload, timeout=30)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 1, (args, done.stderr)
        assert len(lines) == 1, (args, done.stderr)
        assert "does not answer" in lines[0] and url.replace("hunter2", "***") in lines[0]
        assert "hunter2" not in done.stderr + done.stdout
        elapsed[args] = done.elapsed
    tools = toolq("tools", "--app", "tests.apps:registry", redis_url=url)
    assert tools.returncode == 0 and json.loads(tools.stdout)  # needs no Redis
    startup = max(startup, tools.elapsed)
    # The Redis wait itself is capped at one second: each command takes its start-up and
    # that second, with room for start-ups that vary under load.
    assert max(elapsed.values()) < startup + 4, (elapsed, startup)


def test_a_port_in_use_is_refused_before_anything_starts(settings, r):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        api = toolq(
            "api",
            "--app",
            "tests.apps:registry",
            "--port",
            str(port),
            redis_url=settings.redis_url,
        )
        assert api.returncode == 1 and f"cannot listen on 127.0.0.1:{port}" in api.stderr
        assert "token" not in api.stdout  # no token printed for a server that never ran
        dev = toolq(
            "dev",
            "--app",
            "tests.apps:registry",
            "--port",
            str(port),
            redis_url=settings.redis_url,
            timeout=30,
        )
        assert dev.returncode == 1 and f"cannot listen on 127.0.0.1:{port}" in dev.stderr
        assert "Ctrl-C" not in dev.stdout and "token" not in dev.stdout
        assert not live_workers(settings)  # no worker was started


def help_screen(capsys, monkeypatch, *command: str) -> str:
    """``toolq <command> -h`` through the console script's entry point, in this process: a
    help screen is the same code on either side of a process boundary, and each ``toolq``
    process costs about a second of CPU to start."""
    from toolq.cli import main

    monkeypatch.setattr(sys, "argv", ["toolq", *command, "-h"])
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code in (0, None), (command, capsys.readouterr().err)
    return capsys.readouterr().out


def test_version_help_and_metavars(capsys, monkeypatch):
    url = "redis://127.0.0.1:1/0"
    version = toolq("--version", redis_url=url)
    assert version.returncode == 0 and version.stdout.startswith("toolq ")
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("TOOLQ_REDIS_URL", url)
    commands: list[tuple[str, ...]] = [
        (),
        ("worker",),
        ("api",),
        ("dev",),
        ("dispatch",),
        ("tail",),
        ("tools",),
        ("check",),
        ("mcp",),
        ("approvals",),
        ("approvals", "approve"),
        ("approvals", "list"),
    ]
    helps = {command: help_screen(capsys, monkeypatch, *command) for command in commands}
    for command, shown in helps.items():
        assert "Usage: toolq" in shown, (command, shown)
        for placeholder in ("<str>", "<bool>", "<int>", "<float>"):
            assert placeholder not in shown, (command, shown)
        assert "--loglevel" not in shown  # the old spelling is a hidden alias
    assert "--log-level" in helps[("worker",)]
    assert "MODULE:ATTR" in helps[("tools",)]


def test_approvals_need_no_app_and_take_full_ids_prefixes_and_json(settings, workers):
    from tests.apps import registry

    workers.start(pool="threads")
    [beat] = live_workers(settings)
    assert beat["pool"] == "threads"  # not Celery's class name, TaskPool
    with Client(registry, settings) as client:
        batch = client.dispatch(
            [
                {"id": "a", "name": "wipe", "arguments": {"target": "one"}},
                {"id": "b", "name": "wipe", "arguments": {"target": "two"}},
            ],
            principal="agent",
        )
        first, second = batch.call_ids
        url = settings.redis_url
        listed = toolq("approvals", "list", redis_url=url)  # piped, 80 columns, no --app
        assert listed.returncode == 0, listed.stderr
        assert first in listed.stdout and second in listed.stdout
        as_json = json.loads(toolq("approvals", "list", "--json", redis_url=url).stdout)
        assert {item["call_id"] for item in as_json} == {first, second}
        shown = json.loads(toolq("approvals", "show", first[:8], "--json", redis_url=url).stdout)
        assert shown["call_id"] == first and shown["arguments"] == {"target": "one"}
        edited = toolq("approvals", "approve", first[:8], "--args", "{}", redis_url=url)
        assert edited.returncode == 2 and "pass --app" in edited.stderr
        # Two calls whose ids share a prefix: the prefix is refused, naming both.
        keys = Keys(settings.key_prefix)
        r = client.redis
        r.hset(keys.call("feedbeef0001"), "status", "queued")
        r.hset(keys.call("feedbeef0002"), "status", "queued")
        ambiguous = toolq("approvals", "approve", "feedbeef", "--unsigned", redis_url=url)
        assert ambiguous.returncode == 1
        assert "feedbeef0001" in ambiguous.stderr and "feedbeef0002" in ambiguous.stderr
        unknown = toolq("approvals", "show", "0123456789", redis_url=url)
        assert unknown.returncode == 1 and "no call id" in unknown.stderr
        # These workers verify no approvals: an unsigned decision is one they run.
        approved = toolq(
            "approvals",
            "approve",
            first[:8],
            "--by",
            "ops",
            "--unsigned",
            "--digest",
            shown["digest"],
            redis_url=url,
        )
        assert approved.returncode == 0, approved.stderr
        assert first in approved.stdout
        denied = toolq("approvals", "deny", second[:10], "--reason", "no", redis_url=url)
        assert denied.returncode == 0 and second in denied.stdout
        results = batch.wait(timeout=30)
        assert [r.status for r in results] == [CallStatus.SUCCEEDED, CallStatus.DENIED]
        assert results[0].output == "wiped one"


def test_dispatch_wait_prints_what_it_has_on_timeout(settings, inproc):
    inproc.start()
    payload = json.dumps(
        [
            {"id": "c1", "name": "echo", "arguments": {"text": "hi"}},
            {"id": "c2", "name": "wipe", "arguments": {"target": "t"}},
        ]
    )
    done = toolq(
        "dispatch",
        "--app",
        "tests.apps:registry",
        "--run-id",
        "waiting-run",
        "--wait",
        "3",
        redis_url=settings.redis_url,
        stdin=payload,
    )
    assert done.returncode == 1
    printed = json.loads(done.stdout)
    assert printed["run_id"] == "waiting-run"
    echo, wipe = printed["calls"]
    assert echo["status"] == "succeeded" and echo["output"] == {"text": "hi"}
    assert wipe["status"] == "awaiting_approval" and len(wipe["call_id"]) == 32
    assert wipe["call_id"] in done.stderr and "waiting-run" in done.stderr
