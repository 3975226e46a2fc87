"""Slack interaction requests: verified as Slack signs them, then read into typed actions.

Slack signs each request (``v0=`` HMAC-SHA256 of ``v0:<timestamp>:<body>`` under the app's
signing secret, ``X-Slack-Signature``, ``X-Slack-Request-Timestamp``); a request whose
signature does not hold, or made more than 5 minutes ago, is refused before its body is
read (the SDK's ``SignatureVerifier``). What the person pressed is then one of the
``Interaction`` kinds below; the rest of the payload is not trusted for anything but
where to answer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from toolq.slack import blocks


class BadInteraction(Exception):
    """A request that is not a Slack interaction toolq knows (its message says why)."""


def verified(secret: str, body: bytes, timestamp: str | None, signature: str | None) -> bool:
    """True when Slack signed exactly ``body`` with ``secret`` in the last 5 minutes."""
    from slack_sdk.signature import SignatureVerifier

    # ASCII only: str.isdigit takes superscripts int() refuses, and compare_digest raises
    # on str with non-ASCII characters (header values arrive as latin-1 text)
    if not timestamp or not signature or not (timestamp.isascii() and signature.isascii()):
        return False
    if not timestamp.strip().isdigit():
        return False
    return SignatureVerifier(secret).is_valid(body, timestamp.strip(), signature)


@dataclass(frozen=True)
class Decide:
    """Approve or deny one call, as its arguments were shown (``digest``)."""

    approve: bool
    call_id: str
    digest: str
    reason: str = ""
    from_view: bool = False
    """Submitted from the deny modal (its errors go back into it)."""


@dataclass(frozen=True)
class AskReason:
    """Deny pressed: open the modal that asks for a reason (``trigger_id``)."""

    call_id: str
    digest: str
    trigger_id: str


@dataclass(frozen=True)
class OpenPage:
    """Open pressed: the person also gets a one-time link to decide on their phone."""

    call_id: str


@dataclass(frozen=True)
class ApproveRun:
    """The digest's "approve all in this run": each listed call as its arguments were shown."""

    run_id: str
    calls: list[tuple[str, str]]


@dataclass(frozen=True)
class Ignored:
    """Nothing to do (the Open link, an action of another app)."""


Action = Decide | AskReason | OpenPage | ApproveRun | Ignored


@dataclass(frozen=True)
class Interaction:
    """One press: by which Slack user, of which workspace, answered where, doing what."""

    user: str
    team: str | None
    channel: str | None
    action: Action


def _dict(value: object) -> dict[str, Any]:
    """``value`` when it is a JSON object, else an empty one (a field of another shape).

    A field of the wrong type reads as missing: a signed payload is still only trusted for
    where to answer.
    """
    return value if isinstance(value, dict) else {}


def _value(raw: object) -> dict[str, Any]:
    try:
        value = json.loads(str(raw))
    except (ValueError, RecursionError):
        raise BadInteraction("an action value that is not toolq's") from None
    if not isinstance(value, dict):
        raise BadInteraction("an action value that is not toolq's")
    return value


def _call(value: dict[str, Any]) -> tuple[str, str]:
    call_id, digest = value.get("call"), value.get("digest")
    if not isinstance(call_id, str) or not isinstance(digest, str):
        raise BadInteraction("an action value without a call and its digest")
    return call_id, digest


def parse(body: bytes) -> Interaction:
    """The interaction of a verified request body (``payload=<json>``, form-encoded)."""
    try:
        form = parse_qs(body.decode(), strict_parsing=True)
        payload = json.loads(form["payload"][0])
    except (KeyError, IndexError, ValueError, UnicodeDecodeError, RecursionError):
        raise BadInteraction("the body is not a Slack interaction payload") from None
    if not isinstance(payload, dict):
        raise BadInteraction("the body is not a Slack interaction payload")
    user_id = _dict(payload.get("user")).get("id")
    if not isinstance(user_id, str):
        raise BadInteraction("an interaction without a user")
    team_id = _dict(payload.get("team")).get("id")
    channel_id = _dict(payload.get("channel")).get("id")
    kind = payload.get("type")
    if kind == "block_actions":
        action = _block_action(payload)
    elif kind == "view_submission":
        action = _view_submission(payload)
        metadata = _value(_dict(payload.get("view")).get("private_metadata") or "{}")
        channel_id = metadata.get("channel")
    else:
        action = Ignored()
    return Interaction(
        user=user_id,
        team=team_id if isinstance(team_id, str) else None,
        channel=channel_id if isinstance(channel_id, str) else None,
        action=action,
    )


def _block_action(payload: dict[str, Any]) -> Action:
    actions = payload.get("actions")
    if not isinstance(actions, list) or not actions or not isinstance(actions[0], dict):
        return Ignored()
    pressed = actions[0]
    action_id = pressed.get("action_id")
    if action_id == blocks.APPROVE:
        call_id, digest = _call(_value(pressed.get("value")))
        return Decide(approve=True, call_id=call_id, digest=digest)
    if action_id == blocks.DENY:
        call_id, digest = _call(_value(pressed.get("value")))
        trigger = payload.get("trigger_id")
        if not isinstance(trigger, str):
            raise BadInteraction("a deny without a trigger_id to open the reason modal")
        return AskReason(call_id=call_id, digest=digest, trigger_id=trigger)
    if action_id == blocks.OPEN:
        call_id, _ = _call(_value(pressed.get("value")))
        return OpenPage(call_id=call_id)
    if action_id == blocks.APPROVE_RUN:
        value = _value(pressed.get("value"))
        run_id, calls = value.get("run"), value.get("calls")
        if not isinstance(run_id, str) or not isinstance(calls, list):
            raise BadInteraction("an approve-all value without its run and calls")
        pairs = []
        for item in calls:
            if not (
                isinstance(item, list) and len(item) == 2 and all(isinstance(x, str) for x in item)
            ):
                raise BadInteraction("an approve-all value with a malformed call")
            pairs.append((item[0], item[1]))
        return ApproveRun(run_id=run_id, calls=pairs)
    return Ignored()


def _view_submission(payload: dict[str, Any]) -> Action:
    view = payload.get("view")
    if not isinstance(view, dict) or view.get("callback_id") != blocks.DENY_VIEW:
        return Ignored()
    call_id, digest = _call(_value(view.get("private_metadata") or "{}"))
    values = _dict(_dict(view.get("state")).get("values"))
    reason = _dict(_dict(values.get(blocks.REASON)).get(blocks.REASON)).get("value")
    return Decide(
        approve=False,
        call_id=call_id,
        digest=digest,
        reason=reason if isinstance(reason, str) else "",
        from_view=True,
    )
