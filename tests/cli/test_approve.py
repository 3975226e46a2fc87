"""``toolq approvals approve`` through the console script, against a worker that verifies.

The CLI never reports an approval that such a worker would refuse: without a signing key
and without the API it refuses in one line and the call stays parked; signed with the key
over the registry's risk, or made by the API as the token's holder, the call runs.
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from tests.conftest import ROOT, SECRETS_KEY, Workers, make_settings, serve
from toolq import CallStatus, Client
from toolq.api.app import create_app
from toolq.keys import Keys
from toolq.settings import ApiToken, Settings
from toolq.signing import generate_pair

pytestmark = pytest.mark.e2e

SCRIPT = Path(sys.executable).with_name("toolq")


def toolq(*args: str, settings: Settings, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {
        key: value
        for key, value in os.environ.items()
        if key not in ("TOOLQ_APP", "TOOLQ_APPROVAL_SIGNING_KEY", "TOOLQ_API_TOKEN")
    }
    environ.update(
        {
            "TOOLQ_REDIS_URL": settings.redis_url,
            "PYTHONPATH": str(ROOT),
            "TOOLQ_SECRETS_KEY": SECRETS_KEY,
            **env,
        }
    )
    command = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "toolq"]
    return subprocess.run(
        [*command, *args], env=environ, cwd=ROOT, capture_output=True, text=True, timeout=60
    )


def parked(client: Client, tool_call_id: str) -> str:
    batch = client.dispatch(
        [{"id": tool_call_id, "name": "wipe", "arguments": {"target": tool_call_id}}],
        principal="agent",
    )
    return batch.call_ids[0]


def wait_final(client: Client, call_id: str) -> CallStatus:
    deadline = time.monotonic() + 30
    while not (found := client.result(call_id)).status.is_final:
        assert time.monotonic() < deadline, found
        time.sleep(0.05)
    return found.status


def status(r: redis.Redis, call_id: str) -> bytes | None:
    return r.hget(Keys().call(call_id), "status")  # type: ignore[return-value]


def test_approve_is_signed_or_refused_never_reported_and_then_refused(
    settings: Settings, workers: Workers, r: redis.Redis
) -> None:
    from tests.apps import registry

    signing, verify = generate_pair()
    workers.start(TOOLQ_APPROVAL_VERIFY_KEYS=verify)
    with Client(registry, settings) as client:
        first, second, third = (parked(client, name) for name in ("a1", "a2", "a3"))

        bare = toolq("approvals", "approve", first, "--by", "alice", settings=settings)
        assert bare.returncode == 1, bare
        assert bare.stdout == "" and len(bare.stderr.strip().splitlines()) == 1, bare.stderr
        assert "TOOLQ_APPROVAL_SIGNING_KEY" in bare.stderr and "--api" in bare.stderr
        # --unsigned is for workers that verify nothing; this one verifies.
        unsigned = toolq("approvals", "approve", first, "--unsigned", settings=settings)
        assert unsigned.returncode == 1 and "verifies approvals" in unsigned.stderr
        assert status(r, first) == b"awaiting_approval"

        signed = toolq(
            "approvals",
            "approve",
            first,
            "--digest",
            client.approvals.get(first).digest,
            "--by",
            "alice",
            settings=settings,
            TOOLQ_APPROVAL_SIGNING_KEY=signing,
            TOOLQ_APP="tests.apps:registry",
        )
        assert signed.returncode == 0, signed.stderr
        assert signed.stdout.startswith(f"approved {first}: ")
        assert wait_final(client, first) is CallStatus.SUCCEEDED

        # Through the API: it signs, as the token's holder; the CLI needs neither key nor app.
        tokens = {
            "alice-t": ApiToken(principal="alice", roles=["viewer", "approver:dangerous"]),
            "sam-t": ApiToken(principal="sam", roles=["viewer", "approver:safe"]),
        }
        api_settings = make_settings(approval_signing_key=signing)
        for api in serve(create_app(api_settings, registry, tokens=tokens)):
            shown = client.approvals.get(second).digest
            forbidden = toolq(
                "approvals",
                "approve",
                second,
                "--digest",
                shown,
                "--api",
                api,
                "--token",
                "sam-t",
                settings=settings,
            )
            assert forbidden.returncode == 1 and "403" in forbidden.stderr
            assert status(r, second) == b"awaiting_approval"
            through = toolq(
                "approvals",
                "approve",
                second,
                "--digest",
                shown,
                settings=settings,
                TOOLQ_API_URL=api,
                TOOLQ_API_TOKEN="alice-t",
            )
            assert through.returncode == 0, through.stderr
            assert through.stdout.startswith(f"approved {second}: ")
            assert wait_final(client, second) is CallStatus.SUCCEEDED
            # A prefix, as the dashboard shows it (it was sent to the API as given: 404).
            by_prefix = toolq(
                "approvals",
                "approve",
                third[:8],
                "--digest",
                client.approvals.get(third).digest,
                settings=settings,
                TOOLQ_API_URL=api,
                TOOLQ_API_TOKEN="alice-t",
            )
            assert by_prefix.returncode == 0, by_prefix.stderr
            assert by_prefix.stdout.startswith(f"approved {third}: ")
            assert wait_final(client, third) is CallStatus.SUCCEEDED
            unknown = toolq(
                "approvals",
                "approve",
                "0000aaaa",
                "--digest",
                "d",
                settings=settings,
                TOOLQ_API_URL=api,
                TOOLQ_API_TOKEN="alice-t",
            )
            assert unknown.returncode == 1 and len(unknown.stderr.strip().splitlines()) == 1
            assert "no call parked for you starts with '0000aaaa'" in unknown.stderr


def rewrite(r: redis.Redis, call_id: str, arguments: dict[str, str]) -> None:
    """What any Redis writer can do to a parked call after it was reviewed."""
    key = Keys().call(call_id)
    envelope = json.loads(r.hget(key, "envelope"))  # type: ignore[arg-type]
    envelope["arguments"] = arguments
    r.hset(key, "envelope", json.dumps(envelope))


def test_approve_without_digest_off_a_terminal_is_refused_and_writes_nothing(
    settings: Settings, client: Client, r: redis.Redis
) -> None:
    """A script approving whatever is parked this instant approves what nobody saw."""
    call_id = parked(client, "nd1")
    record = r.hgetall(Keys().call(call_id))
    signed = {"TOOLQ_APPROVAL_SIGNING_KEY": generate_pair()[0], "TOOLQ_APP": "tests.apps:registry"}
    here = toolq("approvals", "approve", call_id, "--by", "bob", settings=settings, **signed)
    # Through the API: refused before any request (nothing listens at that URL).
    api = ("--api", "http://127.0.0.1:9", "--token", "alice-t")
    there = toolq("approvals", "approve", call_id, *api, settings=settings)
    for refused in (here, there):
        assert refused.returncode == 2, refused
        [line] = refused.stderr.strip().splitlines()
        assert "--digest" in line and f"toolq approvals show {call_id}" in line, line
        assert "terminal" in line and refused.stdout == ""
    assert r.hgetall(Keys().call(call_id)) == record


def test_approve_with_digest_approves_only_the_call_as_reviewed(
    settings: Settings, client: Client, r: redis.Redis
) -> None:
    call_id = parked(client, "nd2")
    shown = client.approvals.get(call_id).digest
    rewrite(r, call_id, {"target": "PRODUCTION"})
    signed = {"TOOLQ_APPROVAL_SIGNING_KEY": generate_pair()[0], "TOOLQ_APP": "tests.apps:registry"}
    stale = toolq("approvals", "approve", call_id, "--digest", shown, settings=settings, **signed)
    assert stale.returncode == 1 and "changed since it was shown" in stale.stderr, stale
    assert status(r, call_id) == b"awaiting_approval"
    current = client.approvals.get(call_id).digest
    done = toolq("approvals", "approve", call_id, "--digest", current, settings=settings, **signed)
    assert done.returncode == 0, done.stderr
    assert status(r, call_id) == b"queued"
    assert client.approvals.get(call_id).arguments == {"target": "PRODUCTION"}


def test_approve_on_a_terminal_shows_the_call_and_approves_it_as_shown(
    settings: Settings, client: Client, r: redis.Redis
) -> None:
    """Without --digest, a person on a terminal is shown the call (tool, arguments, digest)
    and approves what was shown by confirming: a rewrite while they read is refused."""
    call_id = parked(client, "nd3")
    main, child = pty.openpty()
    env = {**os.environ, "TOOLQ_REDIS_URL": settings.redis_url, "PYTHONPATH": str(ROOT)}
    env.update(
        COLUMNS="200",
        NO_COLOR="1",
        TOOLQ_APPROVAL_SIGNING_KEY=generate_pair()[0],
        TOOLQ_APP="tests.apps:registry",
        TOOLQ_SECRETS_KEY=SECRETS_KEY,
    )
    prompt = f"Approve call {call_id} (wipe) as shown?".encode()

    def run(answer: bytes, meanwhile: Callable[[], None] = lambda: None) -> tuple[int, str]:
        proc = subprocess.Popen(
            [sys.executable, "-m", "toolq", "approvals", "approve", call_id, "--by", "bob"],
            stdin=child, stdout=child, stderr=child, env=env, cwd=ROOT,
        )  # fmt: skip
        seen = b""
        while prompt not in seen:
            ready, _, _ = select.select([main], [], [], 60)
            assert ready, seen.decode(errors="replace")
            seen += os.read(main, 65536)
        meanwhile()
        os.write(main, answer)
        code = proc.wait(60)
        while select.select([main], [], [], 0.2)[0]:
            seen += os.read(main, 65536)
        return code, seen.decode(errors="replace")

    try:
        code, shown = run(b"n\n")
        assert code == 1 and '"target": "nd3"' in shown, shown
        assert client.approvals.get(call_id).digest in shown
        assert status(r, call_id) == b"awaiting_approval"
        code, shown = run(b"y\n", lambda: rewrite(r, call_id, {"target": "PRODUCTION"}))
        assert code == 1 and "changed since it was shown" in shown, shown
        assert status(r, call_id) == b"awaiting_approval"
        code, shown = run(b"y\n")
        assert code == 0 and '"target": "PRODUCTION"' in shown, shown
        assert f"approved {call_id}: queued" in shown
        assert status(r, call_id) == b"queued"
    finally:
        os.close(main)
        os.close(child)


def shown_on_a_terminal(
    settings: Settings,
    call_id: str,
    answer: bytes,
    *more: str,
    prompt: bytes = b"as shown?",
) -> tuple[int, bytes]:
    """Run ``approvals approve CALL_ID [MORE]`` on a pty, answer its prompt; its exit and
    every byte the terminal received."""
    main, child = pty.openpty()
    env = {**os.environ, "TOOLQ_REDIS_URL": settings.redis_url, "PYTHONPATH": str(ROOT)}
    env.update(
        COLUMNS="200",
        TOOLQ_APPROVAL_SIGNING_KEY=generate_pair()[0],
        TOOLQ_APP="tests.apps:registry",
        TOOLQ_SECRETS_KEY=SECRETS_KEY,
    )
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "toolq", "approvals", "approve", call_id, "--by", "bob", *more],
            stdin=child, stdout=child, stderr=child, env=env, cwd=ROOT,
        )  # fmt: skip
        seen, deadline = b"", time.monotonic() + 60
        while prompt not in seen and proc.poll() is None:
            assert time.monotonic() < deadline, seen.decode(errors="replace")
            if select.select([main], [], [], 0.2)[0]:
                seen += os.read(main, 65536)
        if proc.poll() is None:
            os.write(main, answer)
        code = proc.wait(60)
        while select.select([main], [], [], 0.2)[0]:
            seen += os.read(main, 65536)
        return code, seen
    finally:
        os.close(main)
        os.close(child)


def test_an_edit_approved_on_a_terminal_is_shown_before_it_is_confirmed(
    settings: Settings, client: Client, r: redis.Redis
) -> None:
    """``--args`` on a terminal: the prompt shows the arguments that will run (the edit),
    under the parked call's, and says so; not only the parked call's, as if approved as is."""
    call_id = parked(client, "ed1")
    edit = '{"target": "staging"}'
    code, seen = shown_on_a_terminal(
        settings, call_id, b"y\n", "--args", edit, prompt=b"with your arguments?"
    )
    shown = re.sub(r"\x1b\[[0-9;]*m", "", seen.decode(errors="replace"))  # colours
    assert code == 0, shown
    assert (
        shown.index('"target": "ed1"')
        < shown.index("your --args")
        < shown.index('"target": "staging"')
    )
    assert f"approved {call_id}: queued" in shown
    assert json.loads(r.hget(f"toolq:call:{call_id}", "envelope"))["arguments"] == {
        "target": "staging"
    }


# What a hostile value can send a terminal: move the cursor up and erase lines (to write
# other arguments over the real ones), hide text (SGR 8), set the window title (OSC), an
# 8-bit CSI, and reverse what follows (U+202E).
HOSTILE = '\x1b[9A\x1b[2K  "content": "hello"\x1b[8m\x1b]0;ok\x1b\\\u009b2J\u202e'
RAW = (b"\x1b[9A", b"\x1b[2K", b"\x1b[8m", b"\x1b]0;", "\u009b".encode(), "\u202e".encode())


def test_a_hostile_argument_cannot_rewrite_the_terminal_that_shows_it(
    settings: Settings, client: Client, r: redis.Redis, tmp_path: Path
) -> None:
    """The person confirms what the terminal shows: a tool argument (here in the preview's
    diff) or a record field a Redis writer set reaches it as visible text, never as
    control sequences that move the cursor over the call shown, and never as rich markup."""
    from tests.apps import registry
    from toolq.testing import TestWorker

    path = tmp_path / "notes.txt"
    path.write_text("hello\n")
    batch = client.dispatch(
        [{"id": "hx1", "name": "edit_file", "arguments": {"path": str(path), "content": HOSTILE}}]
    )
    call_id = batch.call_ids[0]
    with TestWorker(settings, registry) as worker:
        worker.drain()  # the preview: a diff carrying the argument's text
    # the diff carries the argument's text, escaped already by the model every view reads
    assert HOSTILE not in client.approvals.get(call_id).diff["diff_output"]  # type: ignore[index]
    # A Redis writer's field, with markup too: "[/]" closes nothing (rich raised on it).
    r.hset(Keys().call(call_id), "preview_error", f"[/]{HOSTILE}[bold]")
    code, seen = shown_on_a_terminal(settings, call_id, b"n\n")
    assert code == 1, seen.decode(errors="replace")
    assert b"Traceback" not in seen and b"as shown?" in seen, seen.decode(errors="replace")
    for raw in RAW:
        assert raw not in seen, (raw, seen.decode(errors="replace"))
    text = re.sub(r"\x1b\[[0-9;]*m", "", seen.decode())  # rich's own styles
    assert "\\u001b[9A" in text and "\\u009b2J" in text and "\\u202e" in text, text
    assert "[/]" in text and "[awaiting_approval]" in text  # markup of the record: as text
    assert client.approvals.get(call_id).digest in text
    assert status(r, call_id) == b"awaiting_approval"


def test_a_prefix_through_the_api_is_refused_when_the_listing_is_cut(
    settings: Settings, client: Client
) -> None:
    """Past one page of parked calls, the one a prefix finds may not be the only one: an
    identical call (same tool and arguments, so the same digest) in another run could be
    approved instead of the one the person reviewed."""
    from tests.apps import registry

    signing, _ = generate_pair()
    batch = client.dispatch(
        [{"id": f"cut-{i}", "name": "wipe", "arguments": {"target": "same"}} for i in range(1001)],
        principal="agent",
    )
    last = batch.call_ids[-1]
    tokens = {"alice-t": ApiToken(principal="alice", roles=["viewer", "approver:dangerous"])}
    for api in serve(
        create_app(make_settings(approval_signing_key=signing), registry, tokens=tokens)
    ):
        cut = toolq(
            "approvals",
            "approve",
            last[:8],
            "--digest",
            client.approvals.get(last).digest,
            settings=settings,
            TOOLQ_API_URL=api,
            TOOLQ_API_TOKEN="alice-t",
        )
        assert cut.returncode == 1, cut.stdout
        assert "more parked calls than one page" in cut.stderr and "whole call id" in cut.stderr
    assert client.result(last).status is CallStatus.AWAITING_APPROVAL
