"""The on-call commands (calls, runs, bulk approve, tail, dispatch --wait), as subprocesses."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys

import pytest

from tests.api.test_approval_pages import park
from tests.cli.test_cli import toolq
from tests.conftest import ROOT
from toolq import CallStatus
from toolq.signing import generate_pair

pytestmark = pytest.mark.e2e

APP = ("--app", "tests.apps:registry")
APP_AND_WAIT = ("dispatch", *APP, "--wait", "30")


def calls(*specs: tuple[str, dict[str, object]]) -> list[dict[str, object]]:
    return [{"id": f"t{i}", "name": n, "arguments": a} for i, (n, a) in enumerate(specs)]


def test_tail_prints_one_readable_line_per_event(settings, inproc, client):
    inproc.start()
    batch = client.dispatch(calls(("echo", {"text": "hi"}), ("boom", {})), run_id="tail-run")
    batch.wait(20)
    done = toolq("tail", "tail-run", settings=settings)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    echo, boom = batch.call_ids
    assert any(
        re.search(rf"tail-run  {echo[:8]}  echo  succeeded  \S+ {{\"text\": \"hi\"}}", x)
        for x in lines
    ), lines
    assert any(f"{boom[:8]}  boom  failed" in x for x in lines), lines
    assert "\x1b[" not in done.stdout  # no colour codes in a pipe
    assert not any(line.startswith("{") for line in lines)
    unknown = toolq("tail", "no-such-run", settings=settings)
    assert unknown.returncode == 1 and unknown.stdout == ""
    assert unknown.stderr.strip().splitlines() == [
        "error: no events for run 'no-such-run': unknown run, or its events expired"
    ]


def test_calls_list_filters_and_show_prints_record_events_and_outcome(settings, inproc, client):
    inproc.start()
    batch = client.dispatch(calls(("echo", {"text": "hi"}), ("boom", {})), run_id="list-run")
    other = client.dispatch(calls(("echo", {"text": "elsewhere"})), run_id="other-run")
    batch.wait(20)
    other.wait(20)
    echo, boom = batch.call_ids
    listed = toolq("calls", "list", "--run", "list-run", settings=settings)
    assert listed.returncode == 0, listed.stderr
    assert echo in listed.stdout and boom in listed.stdout  # full ids
    assert other.call_ids[0] not in listed.stdout
    assert re.search(rf"{boom} .* list-run +boom +failed .*kaboom", listed.stdout), listed.stdout
    failed = toolq("calls", "list", "--status", "failed", "--json", settings=settings)
    assert [row["call_id"] for row in json.loads(failed.stdout)] == [boom]
    newest = toolq("calls", "list", "--limit", "1", "--json", settings=settings)
    assert "--offset 1" in newest.stderr
    pages = [json.loads(newest.stdout)]
    for offset in (1, 2):
        page = toolq(
            "calls", "list", "--limit", "1", "--offset", str(offset), "--json", settings=settings
        )
        pages.append(json.loads(page.stdout))
    assert sorted(row["call_id"] for page in pages for row in page) == sorted(
        [echo, boom, *other.call_ids]
    )
    assert "--offset" not in page.stderr
    shown = toolq("calls", "show", echo[:8], settings=settings)
    assert shown.returncode == 0, shown.stderr
    assert f"echo  call {echo}  succeeded" in shown.stdout
    assert '"text": "hi"' in shown.stdout and "events:" in shown.stdout
    assert f"{echo[:8]}  echo  queued" in shown.stdout
    assert f"{echo[:8]}  echo  succeeded" in shown.stdout
    unknown = toolq("calls", "show", "feedbeef", settings=settings)
    assert unknown.returncode == 1 and unknown.stdout == ""
    assert unknown.stderr.strip().splitlines() == ["error: no call id is or starts with 'feedbeef'"]


def test_calls_show_masks_secrets_and_cancel_is_the_api_cancel(settings, inproc, client, r):
    batch = client.dispatch(
        calls(("login", {"user": "ann", "password": "s3cret-pw"})), run_id="cancel-run"
    )
    [parked] = batch.call_ids
    shown = toolq("calls", "show", parked, "--json", settings=settings)
    assert shown.returncode == 0, shown.stderr
    view = json.loads(shown.stdout)
    assert view["call"]["status"] == CallStatus.AWAITING_APPROVAL
    assert view["request"]["arguments"] == {"user": "ann", "password": "**********"}
    assert [e["type"] for e in view["events"]] == ["call.awaiting_approval"]
    assert "s3cret-pw" not in shown.stdout
    cancelled = toolq("calls", "cancel", parked, "--by", "oncall", settings=settings)
    assert cancelled.returncode == 0, cancelled.stderr
    assert cancelled.stdout.strip() == f"cancelled {parked}"
    assert client.result(parked).status is CallStatus.CANCELLED
    assert [e.type.value for e in client.events("cancel-run")][-1] == "call.cancelled"
    again = toolq("calls", "cancel", parked, settings=settings)
    assert again.returncode == 1
    assert again.stderr.strip().splitlines() == [
        f"error: call {parked} is already cancelled: nothing to cancel"
    ]


def test_approvals_approve_run_decides_every_pending_call_as_one_approve_does(
    settings, inproc, client
):
    signing, verify = generate_pair()
    inproc.start(approval_verify_keys=verify)  # runs only approvals signed for its own risks
    batch = client.dispatch(
        calls(("transfer", {"amount": 500}), ("wipe", {"target": "t"}), ("echo", {"text": "x"})),
        run_id="bulk-run",
    )
    transfer, wipe, _ = batch.call_ids
    env = {"TOOLQ_APPROVAL_SIGNING_KEY": signing, "TOOLQ_APPROVERS": '{"bob": ["moderate"]}'}
    # what bob reviewed: the listing's JSON, passed back (no terminal to confirm on here)
    listed = toolq("approvals", "list", "--run-id", "bulk-run", "--json", settings=settings)
    assert listed.returncode == 0, listed.stderr
    blind = toolq(
        "approvals", "approve", "--run", "bulk-run", "--by", "bob", *APP, settings=settings, **env
    )
    assert blind.returncode == 2 and "--reviewed" in blind.stderr, blind.stderr
    done = toolq(
        "approvals",
        "approve",
        "--run",
        "bulk-run",
        "--by",
        "bob",
        "--reviewed",
        "-",
        *APP,
        settings=settings,
        stdin=listed.stdout,
        **env,
    )
    assert done.returncode == 1, done.stderr  # one of them refused
    lines = done.stdout.splitlines()
    # its status as read after the decision: queued, or already taken by the worker (so it
    # was beside a second copy of the suite); it runs either way (below)
    approved = f"approved {transfer}  transfer: "
    [status] = [line.removeprefix(approved) for line in lines if line.startswith(approved)]
    assert status in ("queued", "running", "succeeded"), lines
    [refused] = [line for line in lines if line.startswith("refused")]
    assert refused.startswith(f"refused  {wipe}  wipe: ") and "bob" in refused
    assert lines[-1] == "run bulk-run: 1 approved, 1 refused"
    assert client.wait([transfer], timeout=30)[0].output == "moved 500"
    assert client.result(wipe).status is CallStatus.AWAITING_APPROVAL
    unknown = toolq(
        "approvals",
        "approve",
        "--run",
        "no-such-run",
        "--reviewed",
        "-",
        *APP,
        settings=settings,
        stdin="[]",
        **env,
    )
    assert unknown.returncode == 1 and unknown.stdout == ""
    assert unknown.stderr.strip().splitlines() == [
        "error: unknown run 'no-such-run': it has no calls"
    ]


def test_dispatch_wait_shows_progress_on_stderr_and_keeps_stdout_json(settings, inproc):
    inproc.start()
    payload = json.dumps(calls(("echo", {"text": "a"}), ("boom", {})))
    done = toolq(
        "dispatch", *APP, "--run-id", "wait-run", "--wait", "30", settings=settings, stdin=payload
    )
    assert done.returncode == 0, done.stderr
    assert [c["status"] for c in json.loads(done.stdout)["calls"]] == ["succeeded", "failed"]
    lines = done.stderr.splitlines()
    assert lines[-1] == (
        "run wait-run: 0 queued, 0 parked, 0 running, 2/2 done (1 failed, 1 succeeded)"
    ), done.stderr
    assert all(line.startswith("run wait-run: ") for line in lines), done.stderr
    parked = json.dumps(calls(("echo", {"text": "b"}), ("wipe", {"target": "t"})))
    timed_out = toolq(
        "dispatch", *APP, "--run-id", "parked-run", "--wait", "3", settings=settings, stdin=parked
    )
    assert timed_out.returncode == 1
    assert "run parked-run: 0 queued, 1 parked, 0 running, 1/2 done (1 succeeded)" in (
        timed_out.stderr.splitlines()
    ), timed_out.stderr
    assert timed_out.stderr.splitlines()[-1].startswith("error: ")
    assert len(json.loads(timed_out.stdout)["calls"]) == 2


def test_runs_show_lists_the_calls_in_dispatch_order(settings, inproc, client):
    inproc.start()
    batch = client.dispatch(
        calls(("echo", {"text": "1"}), ("boom", {}), ("wipe", {"target": "t"})), run_id="show-run"
    )
    echo, boom, wipe = batch.call_ids
    client.wait([echo, boom], timeout=20)
    shown = toolq("runs", "show", "show-run", settings=settings)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].startswith("run show-run  tenant default  owner -  last dispatch 20")
    assert lines[1] == "3 calls: 1 awaiting_approval, 1 succeeded, 1 failed"
    rows = [line.split() for line in lines[3:]]
    assert [row[:4] for row in rows] == [
        ["0", echo, "echo", "succeeded"],
        ["1", boom, "boom", "failed"],
        ["2", wipe, "wipe", "awaiting_approval"],
    ]
    assert "RuntimeError: kaboom" in lines[4]
    unknown = toolq("runs", "show", "no-such-run", "--json", settings=settings)
    assert unknown.returncode == 1 and unknown.stdout == ""
    assert unknown.stderr.strip().splitlines() == ["error: unknown run id 'no-such-run'"]


def test_runs_list_newest_first_with_counts(settings, inproc, client):
    inproc.start()
    client.dispatch(calls(("echo", {"text": "1"})), run_id="older-run").wait(20)
    newer = client.dispatch(calls(("boom", {}), ("wipe", {"target": "t"})), run_id="newer-run")
    client.wait(newer.call_ids[:1], timeout=20)
    listed = toolq("runs", "list", settings=settings)
    assert listed.returncode == 0, listed.stderr
    rows = [line.split() for line in listed.stdout.splitlines()[1:]]
    assert [row[0] for row in rows] == ["newer-run", "older-run"]
    assert rows[0][-5:] == ["2", "1", "awaiting_approval,", "1", "failed"]
    as_json = toolq("runs", "list", "--limit", "1", "--json", settings=settings)
    [run] = json.loads(as_json.stdout)
    assert run["run_id"] == "newer-run" and run["calls"] == 2
    assert run["statuses"] == {"awaiting_approval": 1, "failed": 1}
    bad = toolq("runs", "list", "--limit", "0", settings=settings)
    assert bad.returncode == 2 and "--limit" in bad.stderr
    first = toolq("runs", "list", "--limit", "1", settings=settings)
    [cursor] = re.findall(r"--cursor (\S+)", first.stderr)
    assert [line.split()[0] for line in first.stdout.splitlines()[1:]] == ["newer-run"]
    second = toolq("runs", "list", "--limit", "1", "--cursor", cursor, settings=settings)
    assert [line.split()[0] for line in second.stdout.splitlines()[1:]] == ["older-run"]
    assert "--cursor" not in second.stderr


def test_calls_retry_dispatches_a_linked_call_that_runs(settings, inproc, client):
    inproc.start()
    batch = client.dispatch(calls(("boom", {}), ("echo", {"text": "ok"})), run_id="retry-run")
    boom, echo = batch.call_ids
    batch.wait(20)
    retried = toolq("calls", "retry", boom[:8], *APP, settings=settings)
    assert retried.returncode == 0, retried.stderr
    # The worker may have run it already: its state is whatever it was when read.
    line = retried.stdout.strip()
    match = re.fullmatch(rf"retried {boom} as (\w+): (queued|running|failed)", line)
    assert match, retried.stdout
    new = client.wait([match[1]], timeout=20)[0]
    assert new.status is CallStatus.FAILED and new.retry_of == boom and new.run_id == "retry-run"
    assert new.attempts == 1 and "kaboom" in (new.error or "")  # it ran again, on the worker
    assert client.result(boom).retried_by == match[1]
    refused = toolq("calls", "retry", echo, *APP, settings=settings)
    assert refused.returncode == 1 and refused.stdout == ""
    assert refused.stderr.strip().splitlines() == [
        f"error: call {echo} is succeeded: it succeeded; only a failed, denied, expired or "
        "cancelled call can be retried"
    ]


def on_a_terminal(*args: str, settings, stdin: str = "") -> tuple[int, str, str]:
    """Run the CLI with stdout and stderr on a pseudo-terminal each; (exit, stdout, stderr)."""
    out_main, out_child = pty.openpty()
    err_main, err_child = pty.openpty()
    env = {**os.environ, "TOOLQ_REDIS_URL": settings.redis_url, "PYTHONPATH": str(ROOT)}
    env.update(COLUMNS="200", TERM="xterm-256color")
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "toolq", *args],
        stdin=subprocess.PIPE,
        stdout=out_child,
        stderr=err_child,
        env=env,
        cwd=ROOT,
    )
    os.close(out_child)
    os.close(err_child)
    proc.stdin.write(stdin.encode())
    proc.stdin.close()
    chunks: dict[int, list[bytes]] = {out_main: [], err_main: []}
    open_fds = [out_main, err_main]
    while open_fds:
        ready, _, _ = select.select(open_fds, [], [], 60)
        assert ready, "no output for 60 s"
        for fd in ready:
            try:
                data = os.read(fd, 65536)
            except OSError:  # EIO: the child closed its end
                data = b""
            if data:
                chunks[fd].append(data)
            else:
                open_fds.remove(fd)
                os.close(fd)
    code = proc.wait(60)
    return code, b"".join(chunks[out_main]).decode(), b"".join(chunks[err_main]).decode()


def test_on_a_terminal_tail_is_coloured_and_dispatch_shows_a_live_status(settings, inproc):
    inproc.start()
    payload = json.dumps(calls(("echo", {"text": "tty"})))
    code, out, err = on_a_terminal(
        *APP_AND_WAIT, "--run-id", "tty-run", settings=settings, stdin=payload
    )
    assert code == 0, err
    assert json.loads(out)["calls"][0]["status"] == "succeeded"  # stdout is the JSON still
    assert "run tty-run: 0 queued, 0 parked, 0 running, 1/1 done (1 succeeded)" in err
    code, out, err = on_a_terminal("tail", "tty-run", settings=settings)
    assert code == 0, err
    assert "\x1b[" in out and "succeeded" in out  # rich colours on a terminal


def test_approve_run_approves_the_calls_as_listed_not_as_renamed_since(settings, client, r):
    """The approver lists the run (``purge``); a Redis writer renames the parked call's tool
    to ``hurry`` (same arguments, same risk); the approval of the run as listed refuses it
    (it was approved: the CLI bound each call to the digest it read at approve time)."""
    [call_id] = park(client, 1, run_id="r-cli-rename", tool="purge")
    signing, _ = generate_pair()
    listed = toolq("approvals", "list", "--run-id", "r-cli-rename", "--json", settings=settings)
    assert [c["name"] for c in json.loads(listed.stdout)] == ["purge"], listed.stderr
    key = f"toolq:call:{call_id}"
    envelope = json.loads(r.hget(key, "envelope"))
    envelope["name"] = "hurry"
    r.hset(key, mapping={"envelope": json.dumps(envelope), "name": "hurry"})
    done = toolq(
        "approvals",
        "approve",
        "--run",
        "r-cli-rename",
        "--by",
        "bob",
        "--reviewed",
        "-",
        *APP,
        settings=settings,
        stdin=listed.stdout,
        TOOLQ_APPROVAL_SIGNING_KEY=signing,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"refused  {call_id}  purge: " in done.stdout and "changed" in done.stdout
    assert client.result(call_id).status.value == "awaiting_approval"


def test_approve_run_on_a_terminal_shows_the_calls_and_approves_those_confirmed(settings, client):
    """Without --reviewed, a person on a terminal is shown each pending call (tool and
    arguments) and approves exactly those by confirming; answering no approves nothing."""
    calls_ = park(client, 2, run_id="r-tty", tool="wipe")
    signing, _ = generate_pair()
    main, child = pty.openpty()
    env = {**os.environ, "TOOLQ_REDIS_URL": settings.redis_url, "PYTHONPATH": str(ROOT)}
    env.update(COLUMNS="200", NO_COLOR="1", TOOLQ_APPROVAL_SIGNING_KEY=signing)

    def run(answer: bytes) -> tuple[int, str]:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "toolq",
                "approvals",
                "approve",
                "--run",
                "r-tty",
                "--by",
                "bob",
                *APP,
            ],
            stdin=child,
            stdout=child,
            stderr=child,
            env=env,
            cwd=ROOT,
        )
        seen = b""
        while b"Approve these 2 call(s) of run r-tty?" not in seen:
            ready, _, _ = select.select([main], [], [], 60)
            assert ready, seen.decode(errors="replace")
            seen += os.read(main, 65536)
        os.write(main, answer)
        code = proc.wait(60)
        while select.select([main], [], [], 0.2)[0]:
            seen += os.read(main, 65536)
        return code, seen.decode(errors="replace")

    try:
        code, shown = run(b"n\n")
        assert code == 1 and shown.count('"target": "/tmp/x"') == 2, shown
        assert all(call_id in shown for call_id in calls_)
        assert {p.call_id for p in client.approvals.pending(run_id="r-tty")} == set(calls_)
        code, shown = run(b"y\n")
        assert code == 0 and "run r-tty: 2 approved, 0 refused" in shown, shown
        assert client.approvals.pending(run_id="r-tty") == []
    finally:
        os.close(main)
        os.close(child)
