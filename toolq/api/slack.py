"""``POST /v1/slack/interactions``: the Slack app's interactivity URL.

Slack posts each button press and modal submission here, signed with the app's signing
secret (``toolq.slack.interactions``); anything else is refused with a 401 before it is
read. The Slack user must be mapped to a toolq principal (``TOOLQ_SLACK_USERS``), of the
app's workspace when ``TOOLQ_SLACK_TEAM`` names one, and that principal decides like any
other: the same checks as the HTTP API (tenant, approver role of the tool's risk:
``toolq.api.deciding``), then ``ApprovalStore`` signs, audits, counts the quorum and refuses
a submitter's own call. A refusal is told to that person only (an ephemeral message, or an
error in the deny modal); the approval message itself is updated by the workers once the
decision's event reaches the outbox, wherever the decision was made.
"""

from __future__ import annotations

import contextlib
from typing import Any

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from toolq.api.auth import AuthenticationError, Principal
from toolq.api.deciding import may_decide
from toolq.api.decision_tokens import DecisionTokens
from toolq.dispatch.client import Client
from toolq.errors import (
    DigestMismatchError,
    NotAuthorizedError,
    PayloadError,
    ToolqError,
)
from toolq.models import CallResult, CallStatus
from toolq.slack import blocks
from toolq.slack.interactions import (
    ApproveRun,
    AskReason,
    BadInteraction,
    Decide,
    Interaction,
    OpenPage,
    parse,
    verified,
)
from toolq.slack.web import SlackCallError, SlackWeb
from toolq.webhooks.payload import slack_code, slack_escaped

NOTE = "from Slack"


class SlackInteractions:
    """Turns verified interactions into decisions made as the mapped principal."""

    def __init__(self, client: Client, web: SlackWeb) -> None:
        self.client = client
        self.settings = client.settings
        self.web = web
        self.tokens = DecisionTokens(client.settings)

    def principal(self, interaction: Interaction) -> Principal:
        """The toolq principal a Slack user acts as; ``NotAuthorizedError`` if none."""
        team = self.settings.slack_team
        if team is not None and interaction.team != team:
            raise NotAuthorizedError(
                f"interactions from Slack workspace {interaction.team!r} are not accepted"
            )
        grant = self.settings.slack_users.get(interaction.user)
        if grant is None:
            raise NotAuthorizedError(
                f"Slack user {interaction.user} is not mapped to a toolq approver "
                "(TOOLQ_SLACK_USERS)",
                by=interaction.user,
            )
        return Principal(grant.principal, frozenset(grant.roles), grant.tenant)

    def handle(self, interaction: Interaction) -> dict[str, Any] | None:
        """Act on one interaction; the body to answer Slack with (None: an empty 200)."""
        action = interaction.action
        try:
            caller = self.principal(interaction)
            if isinstance(action, Decide):
                said = self.decide(caller, action)
            elif isinstance(action, AskReason):
                may_decide(self.client, action.call_id, caller)
                try:
                    self.web.open_view(
                        action.trigger_id,
                        blocks.deny_view(action.call_id, action.digest, interaction.channel),
                    )
                except SlackCallError as exc:  # an expired trigger (3 s), a rate limit
                    error = slack_escaped(exc.error)
                    said = f":warning: Slack did not open the reason dialog ({error}): Deny again"
                else:
                    return None
            elif isinstance(action, ApproveRun):
                said = self.approve_run(caller, action)
            elif isinstance(action, OpenPage):
                link = self.one_time_link(caller, action.call_id)
                if link is None:
                    return None
                said = f"Your one-time link to decide this call on any device: <{link}|open>"
            else:
                return None
        except ToolqError as exc:
            if isinstance(action, OpenPage):
                return None  # the page opened anyway; it says what this person may do
            if isinstance(action, Decide) and action.from_view:
                return {"response_action": "errors", "errors": {blocks.REASON: exc.message}}
            self.tell(interaction, f":warning: {slack_escaped(exc.message)}")
            return None
        self.tell(interaction, said)
        return None

    def decide(self, caller: Principal, action: Decide) -> str:
        """Approve or deny one call as ``caller``, as its arguments were shown."""
        request = may_decide(self.client, action.call_id, caller)
        approvals = self.client.approvals
        if action.approve:
            result = approvals.approve(action.call_id, caller.name, note=NOTE, digest=action.digest)
            return _said(result)
        if request.digest != action.digest:
            raise DigestMismatchError(
                f"call {action.call_id}: the call (its tool or arguments) changed since the "
                "message was posted; review the call again",
                call_id=action.call_id,
                digest=request.digest,
            )
        if len(action.reason.encode()) > self.settings.max_reason_bytes:
            raise PayloadError(f"the reason is longer than {self.settings.max_reason_bytes} bytes")
        return _said(approvals.deny(action.call_id, caller.name, action.reason))

    def one_time_link(self, caller: Principal, call_id: str) -> str | None:
        """The approval page with a decision token for ``caller`` (None: none can be made).

        The token is in the fragment, which the browser keeps from every server and log;
        it decides this call once, as ``caller``, while its arguments are the ones shown.
        """
        link = blocks.approval_link(self.settings.public_url, call_id)
        if link is None or self.tokens.key is None:
            return None
        request = may_decide(self.client, call_id, caller)
        if request.status is not CallStatus.AWAITING_APPROVAL:
            return None
        return f"{link}#token={self.tokens.issue(call_id, request.digest, caller)}"

    def approve_run(self, caller: Principal, action: ApproveRun) -> str:
        """Approve each listed call of the run on its own; one line per call."""
        lines = []
        for call_id, digest in action.calls:
            try:
                request = may_decide(self.client, call_id, caller)
                if request.run_id != action.run_id:
                    raise NotAuthorizedError(f"call {call_id} is not part of this run")
                lines.append(self.decide(caller, Decide(True, call_id, digest)))
            except ToolqError as exc:
                lines.append(f":warning: {slack_code(call_id)}: {slack_escaped(exc.message)}")
        return "\n".join(lines) or "Nothing to approve"

    def tell(self, interaction: Interaction, text: str) -> None:
        """An ephemeral message to the person who pressed (where the press happened)."""
        if interaction.channel is None:
            return
        # Failing that, they see the message update (or nothing happen); the decision stands.
        with contextlib.suppress(SlackCallError):
            self.web.ephemeral(interaction.channel, interaction.user, text)


def _said(result: CallResult) -> str:
    tool = slack_code(result.name)
    if result.status is CallStatus.AWAITING_APPROVAL:
        return f":white_check_mark: Your approval of {tool} is recorded; more are needed"
    if result.status is CallStatus.DENIED:
        return f":no_entry: You denied {tool}"
    return f":white_check_mark: You approved {tool}; it runs now"


def build_slack_router(client: Client) -> APIRouter:
    """The interactivity route; a 404 until the Slack app is configured (secret, token)."""
    settings = client.settings
    router = APIRouter(prefix="/v1/slack")
    configured = settings.slack_signing_secret
    secret = configured.get_secret_value() if configured is not None else ""
    handler = SlackInteractions(client, SlackWeb(settings)) if secret else None

    @router.post("/interactions", response_model=None)
    async def interactions(request: Request) -> Response:
        """Slack's interactivity URL: Approve, Deny (its modal), approve-all presses.

        Signed by Slack (``X-Slack-Signature``, ``X-Slack-Request-Timestamp``, 5 minutes),
        else 401; form-encoded ``payload=<json>`` as Slack sends it, else 400.
        """
        if handler is None:
            raise HTTPException(404, "Slack is not configured (TOOLQ_SLACK_SIGNING_SECRET)")
        body = await request.body()
        headers = request.headers
        signed = verified(
            secret,
            body,
            headers.get("x-slack-request-timestamp"),
            headers.get("x-slack-signature"),
        )
        if not signed:
            raise AuthenticationError(
                "not signed by Slack with this app's signing secret in the last 5 minutes"
            )
        try:
            interaction = parse(body)
        except BadInteraction as exc:
            raise PayloadError(str(exc)) from None
        answer = await run_in_threadpool(handler.handle, interaction)
        return JSONResponse(answer) if answer is not None else Response(status_code=200)

    return router
