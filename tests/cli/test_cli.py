"""The `toolq` console script, run as a real subprocess."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from anthropic.types import ToolParam
from pydantic import TypeAdapter

from tests.conftest import OWNED_MARK, ROOT
from toolq import CallStatus
from toolq.signing import generate_pair

SIGNING_KEY = generate_pair()[0]
"""Signs the CLI's approvals (the in-process workers do not verify them)."""

pytestmark = pytest.mark.e2e


def toolq(*args: str, settings, stdin: str | None = None, timeout: float = 60, **env: str):
    environ = {
        **os.environ,
        "TOOLQ_REDIS_URL": settings.redis_url,
        "PYTHONPATH": str(ROOT),
        "COLUMNS": "200",
        **env,
    }
    return subprocess.run(
        [sys.executable, "-m", "toolq", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=environ,
        cwd=ROOT,
        timeout=timeout,
    )


def test_tools_prints_schemas_in_each_format(settings):
    done = toolq(
        "tools", "--app", "tests.apps:registry", "--format", "anthropic", settings=settings
    )
    assert done.returncode == 0, done.stderr
    tools = json.loads(done.stdout)
    assert {t["name"] for t in tools} >= {"echo", "add", "wipe"}
    for tool in tools:
        TypeAdapter(ToolParam).validate_python(tool)
    bad = toolq("tools", "--app", "tests.apps:registry", "--format", "cobol", settings=settings)
    assert bad.returncode == 2 and "'cobol' is not one of openai" in bad.stderr


def test_bad_app_reference_is_a_clear_error(settings):
    done = toolq("tools", "--app", "no_such_module:registry", settings=settings)
    assert done.returncode == 2
    assert "cannot import 'no_such_module'" in done.stderr


def test_a_command_without_a_history_store_loads_no_sql(settings):
    """SQLAlchemy costs each command about 0.7 s of CPU to import; only a command that
    reads or writes the history store (``TOOLQ_HISTORY_URL``) needs it."""
    probe = (
        "import runpy, sys\n"
        "sys.argv = ['toolq', 'approvals', 'list']\n"
        "try:\n"
        "    runpy.run_module('toolq', run_name='__main__')\n"
        "except SystemExit as exit:\n"
        "    assert not exit.code, exit.code\n"
        "print('loaded' if 'sqlalchemy' in sys.modules else 'not loaded')\n"
    )
    environ = {**os.environ, "TOOLQ_REDIS_URL": settings.redis_url, "PYTHONPATH": str(ROOT)}
    environ.pop("TOOLQ_HISTORY_URL", None)
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          env=environ, cwd=ROOT, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "not loaded", done.stdout


def test_check_exit_codes(settings, workers):
    assert toolq("check", "--risk", "safe", settings=settings).returncode == 1
    dead = toolq("check", settings=settings, TOOLQ_REDIS_URL="redis://127.0.0.1:1/0")
    assert dead.returncode == 1 and "does not answer" in dead.stderr
    workers.start("safe")
    assert toolq("check", "--risk", "safe", settings=settings).returncode == 0
    missing = toolq("check", "--risk", "safe,dangerous", settings=settings)
    assert missing.returncode == 1 and "toolq.dangerous" in missing.stderr


def test_dispatch_tail_and_approvals(settings, inproc):
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
        "cli-run",
        settings=settings,
        stdin=payload,
    )
    assert done.returncode == 0, done.stderr
    calls = json.loads(done.stdout)["calls"]
    parked = calls[1]["call_id"]
    listed = toolq("approvals", "list", "--app", "tests.apps:registry", settings=settings)
    assert parked in listed.stdout
    shown = toolq("approvals", "show", parked, "--json", settings=settings)
    digest = json.loads(shown.stdout)["digest"]
    approved = toolq(
        "approvals",
        "approve",
        parked,
        "--digest",
        digest,
        "--by",
        "ops",
        "--app",
        "tests.apps:registry",
        settings=settings,
        TOOLQ_APPROVAL_SIGNING_KEY=SIGNING_KEY,
    )
    assert approved.returncode == 0, approved.stderr
    again = toolq(
        "approvals",
        "approve",
        parked,
        "--digest",
        digest,
        "--app",
        "tests.apps:registry",
        settings=settings,
        TOOLQ_APPROVAL_SIGNING_KEY=SIGNING_KEY,
    )
    assert again.returncode == 1 and "not awaiting approval" in again.stderr
    waited = toolq(
        "dispatch",
        "--app",
        "tests.apps:registry",
        "--run-id",
        "cli-run",
        "--wait",
        "20",
        "--messages",
        "openai",
        settings=settings,
        stdin=payload,
    )
    messages = json.loads(waited.stdout)
    assert [m["tool_call_id"] for m in messages] == ["c1", "c2"]
    assert "wiped t" in messages[1]["content"]
    tail = toolq("tail", "cli-run", "--json", settings=settings)
    types = [json.loads(line)["type"] for line in tail.stdout.splitlines()]
    assert types.count("call.succeeded") == 2 and "call.approved" in types


# Redis, three workers and the API start at once, and `toolq dev` gives the API 30 s to
# answer: with the suite running twice beside other jobs on two cores it did not.
@pytest.mark.serial
def test_dev_starts_everything_and_stops_on_ctrl_c(settings, r):
    import httpx

    from toolq.cli.stack import _free_port

    port = _free_port()
    environ = {
        **os.environ,
        "TOOLQ_REDIS_URL": settings.redis_url,
        "PYTHONPATH": str(ROOT),
        # The default heartbeat (5 s, alive for three periods): with 2 s, a worker starved of
        # CPU for 6 s beside a second suite read as gone to the `check` below. Its withdrawal
        # at Ctrl-C deletes the heartbeat, whatever the period.
    }
    # Started with SIGINT ignored, as a script's background job (or a test worker whose
    # earlier tests left it so) starts it: Ctrl-C must stop it all the same.
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "toolq",
            "dev",
            "--app",
            "tests.apps:registry",
            "--redis-url",
            settings.redis_url,
            "--pool",
            "threads",
            "--port",
            str(port),
        ],
        env=environ,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    signal.signal(signal.SIGINT, previous)
    try:
        lines = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            lines.append(line)
            if "Ctrl-C to stop" in line:
                break
        output = "".join(lines)
        for queue in ("toolq.safe", "toolq.moderate", "toolq.dangerous"):
            assert queue in output
        assert toolq("check", settings=settings).returncode == 0
        token = next(line.split()[1] for line in lines if line.strip().startswith("token"))
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 20
        while True:
            try:
                tools = httpx.get(f"{url}/v1/tools", headers={"Authorization": f"Bearer {token}"})
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline
                time.sleep(0.2)
        assert tools.status_code == 200 and tools.json()
        assert httpx.get(f"{url}/v1/tools").status_code == 401
        # The workers archive finished calls to the SQLite history store dev made.
        history_url = next(line.split()[1] for line in lines if line.strip().startswith("history"))
        assert history_url.startswith("sqlite:///")
        sent = httpx.post(
            f"{url}/v1/runs/r-dev/calls",
            json=[{"id": "e1", "name": "echo", "arguments": {"text": "hi"}}],
            headers={"Authorization": f"Bearer {token}"},
        )
        assert sent.status_code == 202, sent.text
        call_id = sent.json()["calls"][0]["call_id"]
        from toolq.history.store import HistoryStore

        history = HistoryStore(history_url)
        try:
            deadline = time.monotonic() + 30
            while history.record(call_id) is None:
                assert time.monotonic() < deadline, "the call was not archived"
                time.sleep(0.2)
            assert history.record(call_id)["status"] == "succeeded"
        finally:
            history.close()
        proc.send_signal(signal.SIGINT)
        # Read what it prints while it stops: a full pipe would block its processes' exit.
        rest, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0, rest[-4000:]
        assert toolq("check", settings=settings).returncode == 1  # workers withdrew
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def _demo(*args: str, tmp: object, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "toolq", "demo", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "TMPDIR": str(tmp), **env},
        cwd=ROOT,
        timeout=120,
    )


def _kept_keys(r) -> set[bytes]:
    # kombu's own table of binding deadlines (Celery's remote-control fanout) is shared by
    # every Celery worker of a Redis and swept by kombu itself
    return set(r.keys("*")) - {OWNED_MARK.encode(), b"_kombu.binding_deadlines"}


def test_demo_runs_on_its_own_redis_even_when_another_answers(r, settings, tmp_path):
    # the attack on a shared machine: the demo would run on (and leave keys in) a Redis
    # someone else owns, because TOOLQ_REDIS_URL names it or it answers on the default port
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    done = _demo(tmp=scratch, TOOLQ_REDIS_URL=settings.redis_url, TOOLQ_DEMO_DIR=str(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "embedded redis-server" in done.stdout
    assert "TOOLQ_REDIS_URL is ignored" in done.stdout
    assert "call.approved" in done.stdout
    messages = json.loads(done.stdout[done.stdout.index("[\n") :])
    assert len(messages) == 3 and all(m["role"] == "tool" for m in messages)
    assert (tmp_path / "toolq-demo" / "archived.txt").exists()
    assert CallStatus.SUCCEEDED.value in done.stdout
    assert not _kept_keys(r)  # nothing was written to the Redis it does not own
    assert not list(scratch.iterdir())  # its Redis, worker log and files are gone


def test_demo_on_a_given_redis_removes_every_key_it_wrote(r, settings, tmp_path):
    r.set("toolq:call:someone-elses", "x")  # a toolq of someone else's on the same Redis
    done = _demo("--redis-url", settings.redis_url, tmp=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "existing Redis" in done.stdout and "removed the demo's" in done.stdout
    assert settings.redis_url.split("@")[0] not in done.stdout or ":***@" in done.stdout
    assert _kept_keys(r) == {b"toolq:call:someone-elses"}
    assert not list(tmp_path.iterdir())


def test_dev_refuses_a_given_redis_that_does_not_answer(settings, tmp_path):
    dead = "redis://127.0.0.1:1/0"
    done = toolq(
        "dev",
        "--app",
        "tests.apps:registry",
        "--redis-url",
        dead,
        "--no-api",
        settings=settings,
        timeout=30,
    )
    assert done.returncode == 2, done.stdout + done.stderr  # a configuration error
    assert "nothing answers at redis://127.0.0.1:1/0" in done.stderr
    assert "Traceback" not in done.stderr


def test_approvals_show_diff_and_approve_with_edited_args(settings, inproc, tmp_path, wait_for):
    from tests.apps import registry
    from toolq import Client

    inproc.start()
    target = tmp_path / "a.txt"
    target.write_text("one\n")
    with Client(registry, settings) as client:
        batch = client.dispatch(
            [
                {
                    "id": "f",
                    "name": "edit_file",
                    "arguments": {"path": str(target), "content": "two\n"},
                }
            ]
        )
        call_id = batch.call_ids[0]
        wait_for(lambda: client.approvals.get(call_id).diff is not None)
        shown = toolq(
            "approvals", "show", call_id, "--app", "tests.apps:registry", settings=settings
        )
        assert shown.returncode == 0, shown.stderr
        assert "-one" in shown.stdout and "+two" in shown.stdout
        digest = client.approvals.get(call_id).digest
        bad = toolq(
            "approvals",
            "approve",
            call_id,
            "--digest",
            digest,
            "--args",
            '{"path": 1}',
            "--app",
            "tests.apps:registry",
            settings=settings,
            TOOLQ_APPROVAL_SIGNING_KEY=SIGNING_KEY,
        )
        assert bad.returncode == 1 and "invalid arguments" in bad.stderr
        edited = json.dumps({"path": str(target), "content": "three\n"})
        ok = toolq(
            "approvals",
            "approve",
            call_id,
            "--digest",
            digest,
            "--by",
            "ops",
            "--args",
            edited,
            "--app",
            "tests.apps:registry",
            settings=settings,
            TOOLQ_APPROVAL_SIGNING_KEY=SIGNING_KEY,
        )
        assert ok.returncode == 0, ok.stderr
        assert batch.wait(timeout=20)[0].status is CallStatus.SUCCEEDED
    assert target.read_text() == "three\n"


def test_dev_prints_export_lines_a_shell_can_run(settings):
    # `toolq dev` prints "the export TOOLQ_REDIS_URL=... line to use in other shells"
    # (docs/getting-started.md); pasting each printed export line into a shell must work.
    environ = {
        **{k: v for k, v in os.environ.items() if k != "TOOLQ_SECRETS_KEY"},
        "PYTHONPATH": str(ROOT),
    }
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "toolq", "dev", "--app", "tests.apps:registry"),
            *("--redis-url", settings.redis_url, "--pool", "threads", "--no-api"),
        ],
        env=environ,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        lines = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            lines.append(line)
            if "Ctrl-C to stop" in line or not line:
                break
        exports = [line.strip() for line in lines if line.strip().startswith("export ")]
        assert any("TOOLQ_SECRETS_KEY=" in line for line in exports), "".join(lines)
        # another shell can decide (signing key) and check the audit (verify keys) with them
        assert any("TOOLQ_APPROVAL_VERIFY_KEYS=" in line for line in exports), "".join(lines)
        for line in exports:
            shell = subprocess.run(
                ["bash", "-c", f"{line}\n" + 'echo "${' + line.split()[1].split("=")[0] + '}"'],
                capture_output=True,
                text=True,
                timeout=10,
            )
            assert shell.returncode == 0 and not shell.stderr, (line, shell.stderr)
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def test_dev_ctrl_c_at_a_terminal_stops_redis_after_the_workers(tmp_path):
    # A terminal's Ctrl-C sends SIGINT to the whole foreground process group, the embedded
    # redis-server included: it exits at once, before the workers' warm shutdown, whose
    # history archiver and sweeper then log "Connection refused" tracebacks.
    environ = {
        **{k: v for k, v in os.environ.items() if k != "TOOLQ_REDIS_URL"},
        "PYTHONPATH": str(ROOT),
        "TMPDIR": str(tmp_path),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "toolq", "dev", "--app", "tests.apps:registry", "--no-api"],
        env=environ,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if "Ctrl-C to stop" in line or not line:
                break
        time.sleep(3)  # the workers' maintenance threads are up
        os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C does
        rest, _ = proc.communicate(timeout=90)
        assert proc.returncode == 0, rest[-4000:]
        assert "Traceback" not in rest and "Connection refused" not in rest, rest[-4000:]
        # the embedded Redis and the history store that archived it are gone with the stack
        assert not list(tmp_path.glob("toolq-*")), list(tmp_path.iterdir())
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
