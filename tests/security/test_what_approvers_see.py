"""What an approver is shown is what runs: attacks on the text of the views approvers decide from.

Each test performs an attack on a real Redis with the real stores (a verifying in-process
worker where something runs) and checks the property the security model states: every view an
approver decides from shows characters that hide or reorder text as JSON escapes, and
nothing that runs is hidden from the approver behind a mask that stands for a secret.
"""

from __future__ import annotations

import json

import pytest

from tests.approvals.conftest import Pair, deciding_client, executions, start_verifying
from tests.approvals.test_worker_verification import call
from tests.conftest import make_settings
from toolq import CallStatus, Client
from toolq.registry.secrets import MASK
from toolq.slack.blocks import digest_blocks

pytestmark = pytest.mark.e2e

RLO = "\u202e"
"""RIGHT-TO-LEFT OVERRIDE: ``evil\u202egnp.exe`` reads ``evilexe.png``."""
INVISIBLE = {
    "\u034f": "COMBINING GRAPHEME JOINER",
    "\u115f": "HANGUL CHOSEONG FILLER",
    "\u3164": "HANGUL FILLER",
    "\ufe0f": "VARIATION SELECTOR-16",
    "\u180b": "MONGOLIAN FREE VARIATION SELECTOR ONE",
    "\uffa0": "HALFWIDTH HANGUL FILLER",
}
"""Default-ignorable code points that ``str.isprintable`` accepts: drawn as nothing (or as
a blank), like U+200B, which the views do escape."""


@pytest.fixture
def pair() -> Pair:
    return Pair()


def agent_client() -> Client:
    """The agent: Redis credentials, no signing key."""
    from tests.apps import registry

    return Client(registry, make_settings())


def _texts(blocks: list[dict]) -> list[str]:
    """Every text of a Block Kit message a person reads."""
    found: list[str] = []

    def walk(value: object) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                if key == "text" and isinstance(item, str):
                    found.append(item)
                else:
                    walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(blocks)
    return found


def test_slack_digest_message_shows_reordering_characters_escaped(r):
    """A submitter's parked calls with U+202E in an argument, listed in a run's Slack digest
    message (the one with "Approve all N in this run"): the message must show the escape,
    as the single-call message, the dashboard and the CLI do. It showed the raw character,
    so "evilexe.png" was read for what runs as ``evil\u202egnp.exe``, and the button
    approved it."""
    with agent_client() as agent, deciding_client(Pair()) as approver:
        agent.dispatch(
            [
                {"id": "p1", "name": "purge", "arguments": {"scope": f"evil{RLO}gnp.exe"}},
                {"id": "p2", "name": "purge", "arguments": {"scope": "cache"}},
            ],
            principal="agent",
            run_id="run-digest",
        )
        pending = approver.approvals.pending(run_id="run-digest")
    assert len(pending) == 2
    blocks = digest_blocks("run-digest", pending, None)
    buttons = [e for b in blocks if b.get("type") == "actions" for e in b["elements"]]
    approve_all = json.loads(buttons[0]["value"])
    assert len(approve_all["calls"]) == 2  # the bidi call is in "approve all"
    shown = "\n".join(_texts(blocks))
    assert RLO not in shown, "the digest message shows U+202E raw: evilexe.png is read"
    assert "\\u202e" in shown


@pytest.mark.parametrize("char", sorted(INVISIBLE), ids=lambda c: INVISIBLE[c])
def test_invisible_characters_in_arguments_are_shown_escaped(r, char):
    """``arguments_text`` (the dashboard, the approval page, the call page, the CLI) escapes
    what ``str.isprintable`` refuses; default-ignorable code points that it accepts are drawn
    as nothing and hide in a value just as U+200B does: ``prod`` was shown for a value that
    is not ``prod``."""
    with agent_client() as agent, deciding_client(Pair()) as approver:
        batch = agent.dispatch(
            call("purge", "p1", scope=f"pro{char}d"), principal="agent", run_id="run-inv"
        )
        request = approver.approvals.get(batch.call_ids[0])
    assert request.arguments["scope"] == f"pro{char}d"  # what runs
    assert char not in request.arguments_text, f"U+{ord(char):04X} shown raw"
    assert f"\\u{ord(char):04x}" in request.arguments_text


def test_undo_data_shown_to_the_approver_escapes_reordering_characters(pair: Pair, inproc, r):
    """A Redis writer rewrites a DANGEROUS call's undo data before an approver reviews it
    (``undo_data``: ``GET /v1/calls/{id}/undo``, the call page's confirm dialog). The text
    shown (``undo_text``, "what the handler will get, whole") carried U+202E raw, so the
    approver read another value than the one the signed undo then passed to the handler."""
    start_verifying(inproc, pair.verify)
    with agent_client() as agent, deciding_client(pair) as approver:
        batch = agent.dispatch(
            call("deploy", "d1", service="api", replicas=2), principal="agent", run_id="run-u"
        )
        call_id = batch.call_ids[0]
        shown_call = approver.approvals.get(call_id)
        approver.approvals.approve(call_id, by="alice", digest=shown_call.digest)
        assert batch.wait(timeout=30)[0].status is CallStatus.SUCCEEDED
        rewritten = json.dumps({"call_id": f"evil{RLO}gnp.exe"}, ensure_ascii=False)
        r.set(f"toolq:undo:{call_id}", rewritten)  # a Redis writer, before the review
        shown = approver.undo_data(call_id, approved_by="bob")
        event = approver.undo(call_id, timeout=30, approved_by="bob", shown=shown.undo_digest)
        assert event.type.value == "call.undone"
    assert r.lrange("test:undo:deploy", 0, -1) == [f"evil{RLO}gnp.exe".encode()]  # what ran
    assert RLO not in shown.undo_text, "the undo data was shown with U+202E raw"
    assert "\\u202e" in shown.undo_text


def test_a_plain_value_shaped_like_a_sealed_secret_is_not_masked(pair: Pair, inproc, r):
    """A submitter puts ``{"$toolq_secret": "..."}`` (the stored form of an encrypted secret)
    in a free-form argument that is not secret. Every view masks it as a secret
    (``**********``), the approver approves what they were shown, and the handler receives
    the submitter's plaintext there: a value that ran and that no approver could see."""
    start_verifying(inproc, pair.verify)
    hidden = {"$toolq_secret": "DELETE FROM accounts"}
    with agent_client() as agent, deciding_client(pair) as approver:
        batch = agent.dispatch(
            call(
                "post_json",
                "j1",
                url="https://api.example.com/sql",
                token="sk-live-123",
                body={"note": "harmless", "query": hidden},
            ),
            principal="agent",
            run_id="run-s",
        )
        call_id = batch.call_ids[0]
        assert batch.calls[0].status is CallStatus.AWAITING_APPROVAL
        request = approver.approvals.get(call_id)
        approver.approvals.approve(call_id, by="alice", digest=request.digest)
        assert batch.wait(timeout=30)[0].status is CallStatus.SUCCEEDED
    assert executions(r, call_id) == 1
    received = json.loads(r.lrange(f"test:body:{call_id}", 0, -1)[0])
    assert received["query"] == hidden  # the handler got the submitter's plaintext
    assert request.arguments["token"] == MASK  # the real secret stays masked
    assert request.arguments["body"]["query"] == hidden, (
        f"the approver was shown {request.arguments['body']['query']!r} for a plaintext "
        "value that ran"
    )


def test_the_diff_of_a_preview_shows_reordering_characters_escaped(tmp_path):
    """The diff is computed on a worker from the tool's ``preview`` (tool code, and the
    submitter's arguments): the dashboard and the approval page show its ``diff_output`` as
    text, and ``evil<RLO>gnp.exe`` read ``evilexe.png`` there while ``arguments_text`` on the
    same card was escaped."""
    from tests.apps import registry
    from toolq.testing import TestWorker

    settings = make_settings()
    path = tmp_path / "f.txt"
    path.write_text("old\n")
    with Client(registry, settings) as client:
        batch = client.dispatch(
            call("edit_file", "d1", path=str(path), content=f"evil{RLO}gnp.exe")
        )
        with TestWorker(settings, registry) as worker:
            worker.drain()  # the preview message
        request = client.approvals.get(batch.call_ids[0])
    assert request.diff is not None
    shown = request.diff["diff_output"]
    assert RLO not in shown and "evil\\u202egnp.exe" in shown
    # what the views show of the call beside it (the raw values stay the data that runs)
    assert RLO not in request.arguments_text and RLO not in (request.preview_text or "")


def test_a_preview_error_shows_reordering_characters_escaped():
    """A preview that raises: its message (tool code's, here quoting the submitter's path)
    is shown as ``preview failed: ...`` on the dashboard card and the call page, beside an
    escaped ``arguments_text``; U+202E in it reordered what the approver read there."""
    from toolq import RiskLevel, ToolRegistry
    from toolq.testing import TestWorker

    registry = ToolRegistry()

    def preview(path: str) -> str:
        raise ValueError(f"cannot read {path}")

    @registry.tool(risk=RiskLevel.MODERATE, requires_approval=True, preview=preview)
    def remove(path: str) -> str:
        """Remove a file."""
        return path

    settings = make_settings()
    with Client(registry, settings) as client:
        batch = client.dispatch(call("remove", "p1", path=f"evil{RLO}gnp.exe"))
        with TestWorker(settings, registry) as worker:
            worker.drain()  # the preview message
        request = client.approvals.get(batch.call_ids[0])
    assert request.preview_error, request
    assert RLO not in request.preview_error and "\\u202e" in request.preview_error


def test_approval_metadata_shows_reordering_characters_escaped():
    """``approval_metadata()`` is tool code's (an upstream MCP server's annotations for a
    gateway tool): the dashboard shows its keys and strings as notes on the card."""
    from toolq import RiskLevel, ToolRegistry

    registry = ToolRegistry()

    @registry.tool(
        risk=RiskLevel.MODERATE,
        requires_approval=True,
        approval_metadata={f"tar{RLO}get": [f"evil{RLO}gnp.exe", {"n": f"x{RLO}y"}], "k": 3},
    )
    def remove(path: str) -> str:
        """Remove a file."""
        return path

    with Client(registry, make_settings()) as client:
        batch = client.dispatch(call("remove", "m1", path="a"))
        request = client.approvals.get(batch.call_ids[0])
    assert request.approval_metadata == {
        "tar\\u202eget": ["evil\\u202egnp.exe", {"n": "x\\u202ey"}],
        "k": 3,
    }
