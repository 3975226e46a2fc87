"""What an approver reads is what runs: characters that reorder or hide text are shown escaped.

A U+202E (right-to-left override) in an argument makes ``"evil\u202egnp.exe"`` read
``evilexe.png`` on a web page or in Slack; a U+200B hides inside a name. Approvers see the
arguments as ``arguments_text`` (the dashboard, the approval page, the call page) and as
Slack's code block: both show such characters as JSON escapes, and the text is still JSON
of the very value that runs (and that the digest binds).
"""

from __future__ import annotations

import json

import httpx

from tests.api.conftest import h
from toolq.approvals.models import ApprovalRequest
from toolq.slack.blocks import approval_blocks

HIDDEN = {"target": "evil\u202egnp.exe", "owner": "ad\u200bmin", "note": "a\u2028b\u00a0c"}
RAW = ("\u202e", "\u200b", "\u2028", "\u00a0")


def test_the_api_shows_deceptive_characters_escaped_and_the_text_is_the_same_json(api, client):
    batch = client.dispatch(
        [{"id": "w1", "name": "wipe", "arguments": {"target": "x"}}], principal="agent"
    )
    [call_id] = batch.call_ids
    key = f"toolq:call:{call_id}"
    envelope = json.loads(client.redis.hget(key, "envelope"))
    envelope["arguments"] = HIDDEN  # as a model (or a Redis writer) could put them
    client.redis.hset(key, "envelope", json.dumps(envelope))
    shown = httpx.get(f"{api}/v1/approvals/{call_id}", headers=h("alice-t")).json()
    text = shown["arguments_text"]
    assert not any(raw in text for raw in RAW), text
    assert "\\u202e" in text and "\\u200b" in text
    assert json.loads(text) == HIDDEN == shown["arguments"]  # the value that runs
    listed = httpx.get(f"{api}/v1/approvals", headers=h("alice-t")).json()
    assert not any(raw in listed[0]["arguments_text"] for raw in RAW)


def test_slack_shows_deceptive_characters_escaped(client) -> None:
    batch = client.dispatch([{"id": "w1", "name": "wipe", "arguments": HIDDEN}], principal="agent")
    request: ApprovalRequest = client.approvals.get(batch.call_ids[0])
    blocks = json.dumps(approval_blocks(request, None), ensure_ascii=False)
    assert not any(raw in blocks for raw in RAW[:3])
    assert "\\\\u202e" in blocks  # the escape, shown as text
