"""Slack approvals end to end: a real worker posts from the outbox to a local Slack Web API,
the real HTTP API takes interactions signed as Slack signs them, decisions are signed by the
API and verified by the worker."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import redis

from tests.approvals.conftest import Pair, executions
from tests.conftest import InProcess, approve_shown, make_settings, serve, settings_with_env
from tests.slack.conftest import (
    BOT_TOKEN,
    SIGNING_SECRET,
    TEAM,
    FakeSlack,
    button,
    interact,
    press,
    submit_deny,
    text_of,
)
from toolq.api.app import create_app
from toolq.keys import Keys
from toolq.settings import ApiToken
from toolq.signing import Verifier, parse_public_keys

pytestmark = pytest.mark.e2e

PUBLIC = "https://toolq.example.test"
APPROVERS = "C0APPROVE"
LOW = "C0LOWRISK"
ONCALL = "C0ONCALL"
DANGEROUS = ["viewer", "approver:dangerous"]
TOKENS = {
    "agent-t": ApiToken(principal="agent", roles=["submitter", "viewer"]),
    "alice-t": ApiToken(principal="alice", roles=DANGEROUS),
}
USERS = {
    "UALICE": {"principal": "alice", "roles": DANGEROUS},
    "UBOB": {"principal": "bob", "roles": DANGEROUS},
    "UCAROL": {"principal": "carol", "roles": ["viewer", "approver:moderate"]},
    "USAM": {"principal": "sam", "roles": ["viewer", "approver:safe"]},
    "UAGENT": {"principal": "agent", "roles": DANGEROUS},  # the submitter, as an approver
    "UACME": {"principal": "acme-ops", "roles": DANGEROUS, "tenant": "acme"},
}


def slack_env(slack: FakeSlack, routes: list[dict[str, Any]] | None = None) -> dict[str, str]:
    routes = routes or [
        {"channel": LOW, "risks": ["moderate"], "digest_seconds": 1},
        {"channel": APPROVERS, "risks": ["dangerous"]},
    ]
    return {
        "TOOLQ_SLACK_BOT_TOKEN": BOT_TOKEN,
        "TOOLQ_SLACK_SIGNING_SECRET": SIGNING_SECRET,
        "TOOLQ_SLACK_API_URL": slack.api,
        "TOOLQ_SLACK_ROUTES": json.dumps(routes),
        "TOOLQ_SLACK_USERS": json.dumps(USERS),
        "TOOLQ_SLACK_TEAM": TEAM,
        "TOOLQ_PUBLIC_URL": PUBLIC,
        "TOOLQ_WEBHOOK_BACKOFF": "0.2",
    }


@dataclass
class Stack:
    api: str
    slack: FakeSlack
    pair: Pair
    r: redis.Redis

    def dispatch(self, run_id: str, *calls: tuple[str, str, dict]) -> list[str]:
        body = [{"id": i, "name": n, "arguments": a} for i, n, a in calls]
        sent = httpx.post(
            f"{self.api}/v1/runs/{run_id}/calls",
            json=body,
            headers={"Authorization": "Bearer agent-t"},
        )
        assert sent.status_code == 202, sent.text
        return [c["call_id"] for c in sent.json()["calls"]]

    def call(self, call_id: str) -> dict[str, Any]:
        got = httpx.get(
            f"{self.api}/v1/calls/{call_id}", headers={"Authorization": "Bearer agent-t"}
        )
        assert got.status_code == 200, got.text
        return got.json()

    def wait_status(self, call_id: str, *states: str, timeout: float = 20) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            call = self.call(call_id)
            if call["status"] in states:
                return call
            assert time.monotonic() < deadline, call
            time.sleep(0.05)

    def message(self, call_id: str) -> Any:
        """The approval message posted for ``call_id``."""
        for sent in self.slack.wait("chat.postMessage", channel=APPROVERS):
            if call_id in json.dumps(sent.body):
                return sent
        raise AssertionError(f"no message for {call_id}")

    def audit(self, call_id: str) -> list[dict[str, str]]:
        entries: Any = self.r.xrange(Keys().audit_stream)
        out = []
        for _, fields in entries:
            entry = {k.decode(): v.decode() for k, v in fields.items()}
            if entry.get("call_id") == call_id:
                out.append(entry)
        return out


def build(
    slack: FakeSlack,
    pair: Pair,
    inproc: InProcess,
    r: redis.Redis,
    routes: list[dict[str, Any]] | None = None,
    **api_settings: Any,
) -> Iterator[Stack]:
    from tests.apps import registry

    env = slack_env(slack, routes)
    inproc.start(env=env, approval_verify_keys=pair.verify)
    settings = settings_with_env(
        make_settings(approval_signing_key=pair.signing, **api_settings), env
    )
    for url in serve(create_app(settings, registry, tokens=TOKENS)):
        yield Stack(url, slack, pair, r)


@pytest.fixture
def stack(slack: FakeSlack, inproc: InProcess, r: redis.Redis) -> Iterator[Stack]:
    yield from build(slack, Pair(), inproc, r)


def value_of(sent: Any, action_id: str) -> str:
    found = button(sent.body["blocks"], action_id)
    assert found is not None, sent.body["blocks"]
    return str(found["value"])


def test_parked_call_posts_its_facts_masked_with_buttons(stack: Stack):
    run = "run <!channel> `x` & <evil.example|login>"
    [call_id] = stack.dispatch(run, ("l1", "login", {"user": "ann", "password": "hunter2-pw"}))
    sent = stack.message(call_id)
    body = sent.body
    shown = text_of(body["blocks"])
    assert body["channel"] == APPROVERS
    assert "hunter2-pw" not in json.dumps(body)  # the secret argument is masked
    assert '\\"user\\": \\"ann\\"' in shown or '"user": "ann"' in shown
    assert "Approval needed: login" in shown and "dangerous" in shown
    assert "`agent`" in shown  # the submitter
    assert "<!date^" in shown  # the deadline, in each reader's time zone
    # what the model and the agent chose is inert: no mention, no link of theirs
    assert "<!channel>" not in shown and "<evil" not in shown
    assert "&lt;!channel&gt;" in shown
    approve = json.loads(value_of(sent, "toolq.approve"))
    request = httpx.get(
        f"{stack.api}/v1/approvals/{call_id}", headers={"Authorization": "Bearer alice-t"}
    ).json()
    assert approve == {"call": call_id, "digest": request["digest"]}
    assert value_of(sent, "toolq.deny") == value_of(sent, "toolq.approve")
    assert button(body["blocks"], "toolq.open")["url"] == f"{PUBLIC}/approve/{call_id}"


def test_approve_from_slack_signs_audits_runs_and_updates_the_message(stack: Stack):
    [call_id] = stack.dispatch("run-approve", ("w1", "wipe", {"target": "db"}))
    sent = stack.message(call_id)
    answered = interact(
        stack.api, press("toolq.approve", value_of(sent, "toolq.approve"), "UALICE")
    )
    assert answered.status_code == 200, answered.text
    call = stack.wait_status(call_id, "succeeded")
    assert call["output"] == "wiped db" or executions(stack.r, call_id) == 1
    record = {k.decode(): v.decode() for k, v in stack.r.hgetall(Keys().call(call_id)).items()}
    assert record["decided_by"] == "alice"
    signed = Verifier(parse_public_keys(stack.pair.verify)).payload(record["approval"], "decision")
    assert signed is not None and signed["by"] == "alice" and signed["decision"] == "approve"
    assert [(e["by"], e["outcome"]) for e in stack.audit(call_id)] == [("alice", "approved")]
    assert stack.audit(call_id)[0]["sig"]
    [told] = stack.slack.wait("chat.postEphemeral", user="UALICE")
    assert "approved" in told.body["text"] and told.body["channel"] == APPROVERS
    [update] = stack.slack.wait("chat.update", channel=APPROVERS, ts=sent.ts)
    shown = text_of(update.body["blocks"])
    assert "Approved by `alice`" in shown
    assert button(update.body["blocks"], "toolq.approve") is None  # the buttons are gone


def test_deny_from_slack_asks_a_reason_and_the_call_never_runs(stack: Stack):
    [call_id] = stack.dispatch("run-deny", ("w1", "wipe", {"target": "prod"}))
    sent = stack.message(call_id)
    pressed = interact(stack.api, press("toolq.deny", value_of(sent, "toolq.deny"), "UBOB"))
    assert pressed.status_code == 200
    [opened] = stack.slack.wait("views.open")
    view = opened.body["view"]
    assert opened.body["trigger_id"].startswith("trigger-UBOB")
    assert stack.call(call_id)["status"] == "awaiting_approval"  # nothing decided yet
    submitted = interact(stack.api, submit_deny(view, "UBOB", "not on <!here> prod & not today"))
    assert submitted.status_code == 200 and submitted.content in (b"", b"null")
    call = stack.wait_status(call_id, "denied")
    assert "not on <!here> prod & not today" in call["error"]
    assert executions(stack.r, call_id) == 0
    assert [(e["by"], e["outcome"]) for e in stack.audit(call_id)] == [("bob", "denied")]
    [update] = stack.slack.wait("chat.update", channel=APPROVERS)
    shown = text_of(update.body["blocks"])
    assert "Denied by `bob`: not on &lt;!here&gt; prod &amp; not today" in shown
    assert "<!here>" not in shown


def test_unmapped_underprivileged_and_self_approving_users_are_refused(stack: Stack):
    [call_id] = stack.dispatch("run-refused", ("w1", "wipe", {"target": "db"}))
    sent = stack.message(call_id)
    value = value_of(sent, "toolq.approve")
    for user in ("UNOBODY", "USAM", "UAGENT", "UACME"):
        answered = interact(stack.api, press("toolq.approve", value, user))
        assert answered.status_code == 200
        [told] = stack.slack.wait("chat.postEphemeral", user=user)
        assert told.body["text"].startswith(":warning:"), told.body
    # the deny modal is not even opened for them
    interact(stack.api, press("toolq.deny", value, "UNOBODY"))
    assert len(stack.slack.wait("chat.postEphemeral", count=2, user="UNOBODY")) == 2
    assert not stack.slack.of("views.open")
    # another workspace's user with a mapped id
    other = press("toolq.approve", value, "UALICE", team="T0OTHER")
    assert interact(stack.api, other).status_code == 200
    [told] = stack.slack.wait("chat.postEphemeral", user="UALICE")
    assert "T0OTHER" in told.body["text"]
    texts = {s.body["user"]: s.body["text"] for s in stack.slack.of("chat.postEphemeral")}
    assert "not mapped" in texts["UNOBODY"]
    assert "approver:dangerous" in texts["USAM"]
    assert "self approval" in texts["UAGENT"]  # from Slack either
    assert "acme" in texts["UACME"]  # an approver of another tenant
    assert stack.call(call_id)["status"] == "awaiting_approval"
    # refusals the API audits for its own routes too
    assert [(e["by"], e["outcome"]) for e in stack.audit(call_id)] == [
        ("agent", "refused:self_approval"),
        ("acme-ops", "refused:not_owner"),
    ]


def test_forged_stale_and_tampered_interactions_are_refused(stack: Stack):
    [call_id] = stack.dispatch("run-forged", ("w1", "wipe", {"target": "db"}))
    sent = stack.message(call_id)
    payload = press("toolq.approve", value_of(sent, "toolq.approve"), "UALICE")
    forged = interact(stack.api, payload, secret="not-the-signing-secret")
    stale = interact(stack.api, payload, timestamp=int(time.time()) - 6 * 60)
    future = interact(stack.api, payload, timestamp=int(time.time()) + 6 * 60)
    tampered = interact(stack.api, payload, tamper=True)
    unsigned = httpx.post(
        f"{stack.api}/v1/slack/interactions",
        content=b"payload=%7B%7D",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    for refused in (forged, stale, future, tampered, unsigned):
        assert refused.status_code == 401, refused.text
        assert refused.json()["error"]["code"] == "unauthenticated"
    assert stack.call(call_id)["status"] == "awaiting_approval"
    assert not stack.slack.of("chat.postEphemeral") and stack.audit(call_id) == []
    # signed but not an interaction: a clear 400, never a 500
    from tests.slack.conftest import slack_signature

    stamp = str(int(time.time()))
    garbage = httpx.post(
        f"{stack.api}/v1/slack/interactions",
        content=b"payload=not-json",
        headers={
            "X-Slack-Request-Timestamp": stamp,
            "X-Slack-Signature": slack_signature(SIGNING_SECRET, stamp, b"payload=not-json"),
        },
    )
    assert garbage.status_code == 400 and garbage.json()["error"]["code"] == "invalid_payload"


def test_a_decision_in_the_dashboard_updates_the_slack_message(stack: Stack):
    [call_id] = stack.dispatch("run-dashboard", ("w1", "wipe", {"target": "db"}))
    stack.message(call_id)
    decided = approve_shown(stack.api, call_id, {"Authorization": "Bearer alice-t"})
    assert decided.status_code == 200, decided.text
    [update] = stack.slack.wait("chat.update", channel=APPROVERS)
    assert "Approved by `alice`" in text_of(update.body["blocks"])
    stack.wait_status(call_id, "succeeded")
    # a button pressed on the old message after that is told, and decides nothing more
    stale = interact(
        stack.api, press("toolq.approve", value_of(stack.message(call_id), "toolq.approve"), "UBOB")
    )
    assert stale.status_code == 200
    [told] = stack.slack.wait("chat.postEphemeral", user="UBOB")
    assert "not awaiting approval" in told.body["text"]
    assert executions(stack.r, call_id) == 1


def test_slack_rate_limits_are_waited_out(stack: Stack):
    stack.slack.limit["chat.postMessage"] = (1, 2)
    [call_id] = stack.dispatch("run-limited", ("w1", "wipe", {"target": "db"}))
    sent = stack.message(call_id)
    [limited] = stack.slack.of("chat.postMessage:429")
    # the backoff is 0.2 s; Slack asked for 2 s
    assert sent.at - limited.at >= 1.9


@pytest.fixture
def chased(slack: FakeSlack, inproc: InProcess, r: redis.Redis) -> Iterator[Stack]:
    routes = [
        {
            "channel": APPROVERS,
            "risks": ["dangerous"],
            "remind_before": 3.5,
            "escalate_after": 1.5,
            "escalate_channel": ONCALL,
            "escalate_mention": "S0ONCALL",
        }
    ]
    yield from build(slack, Pair(), inproc, r, routes, approval_timeout=5.0)


def test_reminder_and_escalation_before_a_short_deadline(chased: Stack):
    stack = chased
    [call_id] = stack.dispatch("run-chased", ("w1", "wipe", {"target": "db"}))
    first = stack.message(call_id)
    [escalation] = stack.slack.wait("chat.postMessage", channel=ONCALL, timeout=10)
    assert escalation.at - first.at >= 1.0
    assert escalation.body["text"].startswith(":rotating_light: <!subteam^S0ONCALL>")
    assert button(escalation.body["blocks"], "toolq.approve") is not None
    thread = stack.r.hget(Keys().slack_messages(call_id), APPROVERS).decode()
    reminders = stack.slack.wait("chat.postMessage", channel=APPROVERS, thread_ts=thread)
    assert "Reminder" in reminders[0].body["text"] and reminders[0].body["reply_broadcast"]
    stack.wait_status(call_id, "expired", timeout=15)
    updates = stack.slack.wait("chat.update", count=2)
    assert {u.body["channel"] for u in updates} == {APPROVERS, ONCALL}
    for update in updates:
        assert "Expired" in text_of(update.body["blocks"])
        assert button(update.body["blocks"], "toolq.approve") is None


def test_decided_in_time_nothing_is_chased(chased: Stack):
    stack = chased
    [call_id] = stack.dispatch("run-in-time", ("w1", "wipe", {"target": "db"}))
    sent = stack.message(call_id)
    interact(stack.api, press("toolq.approve", value_of(sent, "toolq.approve"), "UALICE"))
    stack.wait_status(call_id, "succeeded")
    time.sleep(3.0)  # past the escalation and the reminder
    assert not stack.slack.of("chat.postMessage", channel=ONCALL)
    assert [s.body.get("thread_ts") for s in stack.slack.of("chat.postMessage")] == [None]


def test_low_risk_calls_come_in_one_digest_approved_all_at_once(stack: Stack):
    ids = stack.dispatch(
        "run-digest", *[(f"t{i}", "transfer", {"amount": 200 + i}) for i in range(3)]
    )
    [digest] = stack.slack.wait("chat.postMessage", channel=LOW)
    time.sleep(1.5)
    assert len(stack.slack.of("chat.postMessage", channel=LOW)) == 1  # one message, not three
    shown = text_of(digest.body["blocks"])
    assert "3 calls waiting for approval" in shown and "run-digest" in shown
    approve_all = button(digest.body["blocks"], "toolq.approve_run")
    listed = json.loads(approve_all["value"])
    assert sorted(c for c, _ in listed["calls"]) == sorted(ids)
    # a moderate approver only: every call is decided as carol, one by one
    answered = interact(
        stack.api, press("toolq.approve_run", approve_all["value"], "UCAROL", channel=LOW)
    )
    assert answered.status_code == 200
    for call_id in ids:
        stack.wait_status(call_id, "succeeded")
        audit = stack.audit(call_id)
        assert [(e["by"], e["outcome"]) for e in audit] == [("carol", "approved")]
        assert audit[0]["sig"]
    [told] = stack.slack.wait("chat.postEphemeral", user="UCAROL")
    assert told.body["text"].count("You approved") == 3
    updates = stack.slack.wait("chat.update", count=3, channel=LOW)
    assert button(updates[-1].body["blocks"], "toolq.approve_run") is None
    assert (
        text_of(updates[-1].body["blocks"]).count("*queued*")
        + text_of(updates[-1].body["blocks"]).count("*succeeded*")
        + text_of(updates[-1].body["blocks"]).count("*running*")
        == 3
    )


def test_approve_all_decides_only_the_calls_shown(stack: Stack):
    ids = stack.dispatch("run-digest-2", ("t1", "transfer", {"amount": 300}))
    [digest] = stack.slack.wait("chat.postMessage", channel=LOW)
    value = json.loads(button(digest.body["blocks"], "toolq.approve_run")["value"])
    later = stack.dispatch("run-digest-2", ("t2", "transfer", {"amount": 400}))
    other_run = stack.dispatch("run-other", ("t3", "transfer", {"amount": 500}))
    value["calls"].append([other_run[0], "0" * 64])  # a call of another run, smuggled in
    # the value comes from Slack's signed payload, which only toolq's message could hold;
    # even so each call is checked against the run and its digest
    interact(stack.api, press("toolq.approve_run", json.dumps(value), "UCAROL", channel=LOW))
    stack.wait_status(ids[0], "succeeded")
    assert stack.call(later[0])["status"] == "awaiting_approval"
    assert stack.call(other_run[0])["status"] == "awaiting_approval"
    [told] = stack.slack.wait("chat.postEphemeral", user="UCAROL")
    assert "not part of this run" in told.body["text"]


def test_open_gives_an_approver_a_one_time_link_that_decides_as_them(stack: Stack):
    [call_id] = stack.dispatch("run-open", ("w1", "wipe", {"target": "db"}))
    sent = stack.message(call_id)
    opened = button(sent.body["blocks"], "toolq.open")
    for user in ("UNOBODY", "USAM", "UALICE"):
        answered = interact(stack.api, press("toolq.open", opened["value"], user))
        assert answered.status_code == 200
    [told] = stack.slack.wait("chat.postEphemeral", user="UALICE")
    assert not stack.slack.of("chat.postEphemeral", user="UNOBODY")
    assert not stack.slack.of("chat.postEphemeral", user="USAM")
    text = told.body["text"]
    prefix = f"<{PUBLIC}/approve/{call_id}#token="
    assert prefix in text
    token = text.split(prefix, 1)[1].split("|", 1)[0]
    assert token.startswith("tqd_")
    decided = httpx.post(
        f"{stack.api}/v1/decisions/{call_id}/approve",
        json={},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert decided.status_code == 200, decided.text
    stack.wait_status(call_id, "succeeded")
    assert [(e["by"], e["outcome"]) for e in stack.audit(call_id)] == [("alice", "approved")]


@pytest.fixture
def quorum(slack: FakeSlack, inproc: InProcess, r: redis.Redis) -> Iterator[Stack]:
    from tests.apps import registry

    pair = Pair()
    env = slack_env(slack)
    inproc.start(env=env, approval_verify_keys=pair.verify, dangerous_approvals=2)
    settings = settings_with_env(
        make_settings(approval_signing_key=pair.signing, dangerous_approvals=2), env
    )
    for url in serve(create_app(settings, registry, tokens=TOKENS)):
        yield Stack(url, slack, pair, r)


def test_a_quorum_is_counted_from_slack_and_the_message_follows_it(quorum: Stack):
    stack = quorum
    [call_id] = stack.dispatch("run-quorum", ("w1", "wipe", {"target": "db"}))
    sent = stack.message(call_id)
    value = value_of(sent, "toolq.approve")
    interact(stack.api, press("toolq.approve", value, "UALICE"))
    [partial] = stack.slack.wait("chat.update", channel=APPROVERS)
    shown = text_of(partial.body["blocks"])
    assert "Approved by `alice`; more approvals are needed" in shown
    assert button(partial.body["blocks"], "toolq.approve") is not None  # still open
    assert stack.call(call_id)["status"] == "awaiting_approval"
    interact(stack.api, press("toolq.approve", value, "UALICE"))  # alice again counts once
    [told] = stack.slack.wait("chat.postEphemeral", count=2, user="UALICE")[1:]
    assert stack.call(call_id)["status"] == "awaiting_approval", told.body
    interact(stack.api, press("toolq.approve", value, "UBOB"))
    stack.wait_status(call_id, "succeeded")
    assert executions(stack.r, call_id) == 1
    updates = stack.slack.wait("chat.update", count=2, channel=APPROVERS)
    final = text_of(updates[-1].body["blocks"])
    assert "Approved by `bob`" in final and "more approvals" not in final
    assert button(updates[-1].body["blocks"], "toolq.approve") is None
    outcomes = [(e["by"], e["outcome"]) for e in stack.audit(call_id)]
    assert outcomes[0] == ("alice", "approved:partial") and outcomes[-1] == ("bob", "approved")
