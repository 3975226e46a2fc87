"""Slack text from a real worker to a local endpoint: what users and models chose is inert."""

from __future__ import annotations

import json

import pytest

from tests.apps import registry
from tests.webhooks.conftest import Receiver, call, wait_until

pytestmark = pytest.mark.e2e

PUBLIC = "https://toolq.example.test"
PING = "<!channel>"
PHISH = "<https://evil.example|Session expired>"


def slack_env(receiver: Receiver) -> dict[str, str]:
    events = ["call.awaiting_approval", "call.denied", "call.failed"]
    hooks = [{"url": f"{receiver.url}/slack", "format": "slack", "events": events}]
    return {"TOOLQ_WEBHOOKS": json.dumps(hooks), "TOOLQ_PUBLIC_URL": PUBLIC}


def body(text: str) -> bytes:
    return json.dumps({"text": text}, separators=(",", ":"), ensure_ascii=False).encode()


def test_mentions_links_and_code_spans_arrive_as_text(receiver, inproc, client):
    inproc.start(env=slack_env(receiver))
    run = f"run {PING} `x` & {PHISH}"
    parked = client.dispatch(call("w1", "wipe", target="db"), run_id=run, principal="agent")
    (wipe,) = parked.call_ids
    client.approvals.deny(wipe, by=f"bob{PING}`", reason=f"{PHISH}\n{PING} urgent")
    unknown = client.dispatch(call("u1", PING), run_id=run, principal="agent")
    (failed,) = unknown.call_ids
    wait_until(lambda: len(receiver.of("/slack")) == 3, message=str(receiver.received))

    # `run` inside a code span: escaped, its backticks ones that close nothing
    escaped_phish = "&lt;https://evil.example|Session expired&gt;"
    shown_run = f"`run &lt;!channel&gt; \u02cbx\u02cb &amp; {escaped_phish}`"
    registered = ", ".join(sorted(tool.name for tool in registry.list()))
    texts = sorted(r.body for r in receiver.of("/slack"))
    assert texts == sorted(
        [
            body(
                f"toolq: call `wipe` (dangerous) in run {shown_run} is waiting for approval "
                f"<{PUBLIC}/#/calls/{wipe}|open>"
            ),
            body(
                f"toolq: call `wipe` (dangerous) in run {shown_run} was denied by "
                f"`bob&lt;!channel&gt;\u02cb`: {escaped_phish} &lt;!channel&gt; urgent "
                f"<{PUBLIC}/#/calls/{wipe}|open>"
            ),
            body(
                f"toolq: call `&lt;!channel&gt;` (safe) in run {shown_run} failed: unknown tool "
                f"'&lt;!channel&gt;' (registered: {registered}) <{PUBLIC}/#/calls/{failed}|open>"
            ),
        ]
    )
    for got in receiver.of("/slack"):
        assert b"<!" not in got.body and b"<https://evil" not in got.body
