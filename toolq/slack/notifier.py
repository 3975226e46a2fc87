"""``SlackNotifier``: approval messages in Slack, kept as a view of each parked call.

It is a sink of the webhook outbox (``toolq.webhooks.sink``), so every message goes out
from the durable outbox, retried with backoff and Slack's ``Retry-After``:

- ``call.awaiting_approval``: the approval message, posted to the channel of the call's
  route (``TOOLQ_SLACK_ROUTES``), or the call joins its run's next digest. A reminder and
  an escalation are scheduled then, as further outbox deliveries of the same event.
- ``call.approved``, ``call.denied``, ``call.expired``, ``call.cancelled``: every message
  showing the call is updated in place (``chat.update``) with the outcome, whoever decided
  and wherever (Slack, the dashboard, the CLI, the API). Who decided is shown only when a
  signature vouched for it (``toolq.webhooks.provenance``).

Each message of a call is recorded in ``Keys.slack_messages`` (channel → ``ts``). A
reminder, an escalation or a digest finds the call decided by then and posts nothing.
"""

from __future__ import annotations

import hashlib
import logging
import time
from typing import Any

import redis

from toolq.approvals.models import ApprovalRequest
from toolq.approvals.store import ApprovalStore
from toolq.errors import CallNotFoundError
from toolq.keys import Keys
from toolq.models import CallStatus, EventType
from toolq.results.connection import as_text
from toolq.settings import Settings, SlackRoute
from toolq.slack import blocks
from toolq.slack.blocks import Outcome
from toolq.slack.web import SlackCallError, SlackWeb
from toolq.webhooks.outbox import Claimed, Outbox
from toolq.webhooks.payload import Notice, slack_code
from toolq.webhooks.sink import Failure

log = logging.getLogger("toolq.slack")

SINK_ID = "slack-app"
EVENTS = [
    EventType.AWAITING_APPROVAL,
    EventType.APPROVED,
    EventType.DENIED,
    EventType.EXPIRED,
    EventType.CANCELLED,
]
REMIND = "remind"
ESCALATE = "escalate"
DIGEST = "digest"
POSTING = "posting"
"""Field of ``Keys.slack_messages`` while the call's message is being posted."""
POSTING_SECONDS = 60
DIGEST_PREFIX = "digest:"
OUTCOMES = {
    EventType.APPROVED.value: CallStatus.QUEUED,
    EventType.DENIED.value: CallStatus.DENIED,
    EventType.EXPIRED.value: CallStatus.EXPIRED,
    EventType.CANCELLED.value: CallStatus.CANCELLED,
}


def route_for(settings: Settings, request: ApprovalRequest) -> SlackRoute | None:
    """The first route taking the call (by its registry risk and tenant), if any."""
    for route in settings.slack_routes:
        if route.takes(request.risk, request.tenant):
            return route
    return None


class SlackNotifier:
    """Posts, updates, reminds, escalates and digests approval messages (a ``Sink``)."""

    id = SINK_ID
    events = EVENTS

    def __init__(
        self,
        client: redis.Redis,
        keys: Keys,
        settings: Settings,
        approvals: ApprovalStore,
        web: SlackWeb | None = None,
    ) -> None:
        self.redis = client
        self.keys = keys
        self.settings = settings
        self.approvals = approvals
        self.web = web or SlackWeb(settings)

    def deliver(self, claimed: Claimed, notice: Notice, outbox: Outbox) -> Failure | None:
        """Deliver one notice (see the module docstring); None when done."""
        try:
            if claimed.purpose == REMIND:
                self._remind(notice)
            elif claimed.purpose == ESCALATE:
                self._escalate(notice)
            elif claimed.purpose == DIGEST:
                self._digest(claimed, notice, outbox)
            elif notice.type == EventType.AWAITING_APPROVAL.value:
                return self._park(claimed, notice, outbox)
            else:
                return self._outcome(notice)
        except SlackCallError as exc:
            return Failure(f"slack: {exc.error}", exc.retry_after)
        except CallNotFoundError:
            return None  # the record is gone (long after its run ended): nothing to show
        return None

    # -- a call parks --------------------------------------------------------------------

    def _park(self, claimed: Claimed, notice: Notice, outbox: Outbox) -> Failure | None:
        request = self.approvals.get(notice.call_id)
        route = route_for(self.settings, request)
        if route is None or request.status is not CallStatus.AWAITING_APPROVAL:
            return None
        if route.digest_seconds is not None:
            digest_id = _digest_id(request.run_id, route.channel)
            self.redis.sadd(self.keys.slack_digest(digest_id), request.call_id)
            self.redis.expire(self.keys.slack_digest(digest_id), self.settings.result_ttl)
            outbox.schedule(
                claimed,
                f"slack.digest.{digest_id}",
                DIGEST,
                time.time() + route.digest_seconds,
            )
            return None
        messages = self._messages(request.call_id)
        if route.channel not in messages:
            key = self.keys.slack_messages(request.call_id)
            self.redis.hset(key, POSTING, "1")
            self.redis.expire(key, POSTING_SECONDS)
            try:
                ts = self.web.post(
                    route.channel,
                    blocks.fallback_text(request),
                    blocks.approval_blocks(request, self.settings.public_url),
                )
            finally:
                self.redis.hdel(key, POSTING)
            self._record(request.call_id, route.channel, ts)
        self._schedule_chasers(claimed, request, route, outbox)
        return None

    def _schedule_chasers(
        self, claimed: Claimed, request: ApprovalRequest, route: SlackRoute, outbox: Outbox
    ) -> None:
        if route.remind_before is not None and request.deadline is not None:
            at = request.deadline - route.remind_before
            if at > time.time():
                outbox.schedule(claimed, f"{claimed.delivery_id}.{REMIND}", REMIND, at)
        if route.escalate_after is not None:
            at = request.created_at + route.escalate_after
            outbox.schedule(claimed, f"{claimed.delivery_id}.{ESCALATE}", ESCALATE, at)

    def _remind(self, notice: Notice) -> None:
        request = self.approvals.get(notice.call_id)
        route = route_for(self.settings, request)
        channel_ts = self._messages(request.call_id)
        if route is None or request.status is not CallStatus.AWAITING_APPROVAL:
            return
        ts = channel_ts.get(route.channel)
        if ts is None or ts.startswith(DIGEST_PREFIX):
            return
        deadline = blocks.slack_date(request.deadline) if request.deadline else "soon"
        text = (
            f":alarm_clock: Reminder: {slack_code(request.name)} is still waiting for "
            f"approval; its deadline is {deadline}"
        )
        self.web.post(route.channel, text, thread_ts=ts, broadcast=True)

    def _escalate(self, notice: Notice) -> None:
        request = self.approvals.get(notice.call_id)
        route = route_for(self.settings, request)
        if route is None or request.status is not CallStatus.AWAITING_APPROVAL:
            return
        mention = route.escalate_mention
        who = f"{blocks.mention_of(mention)} " if mention else ""
        text = f":rotating_light: {who}{blocks.fallback_text(request)}, with no decision yet"
        if route.escalate_channel is not None:
            if route.escalate_channel in self._messages(request.call_id):
                return
            shown = blocks.approval_blocks(request, self.settings.public_url, mention=mention)
            ts = self.web.post(route.escalate_channel, text, shown)
            self._record(request.call_id, route.escalate_channel, ts)
            return
        thread = self._messages(request.call_id).get(route.channel)
        if thread is not None and not thread.startswith(DIGEST_PREFIX):
            self.web.post(route.channel, text, thread_ts=thread, broadcast=True)

    # -- digests -----------------------------------------------------------------------

    def _digest(self, claimed: Claimed, notice: Notice, outbox: Outbox) -> None:
        first = self.approvals.get(notice.call_id)
        route = route_for(self.settings, first)
        if route is None:
            return
        digest_id = _digest_id(first.run_id, route.channel)
        waiting_key = self.keys.slack_digest(digest_id)
        raw: Any = self.redis.smembers(waiting_key)
        requests = []
        for call_id in sorted(as_text(c) for c in raw):
            try:
                request = self.approvals.get(call_id)
            except CallNotFoundError:
                self.redis.srem(waiting_key, call_id)
                continue
            if request.status is not CallStatus.AWAITING_APPROVAL:
                self.redis.srem(waiting_key, call_id)
                continue
            requests.append(request)
        shown = sorted(requests, key=lambda r: r.created_at)[: blocks.DIGEST_MAX]
        if shown:
            ts = self.web.post(
                route.channel,
                blocks.digest_text(first.run_id, len(shown)),
                blocks.digest_blocks(first.run_id, shown, self.settings.public_url),
            )
            listed = self.keys.slack_digest_message(route.channel, ts)
            pipe = self.redis.pipeline(transaction=True)
            pipe.sadd(listed, *[r.call_id for r in shown])
            pipe.expire(listed, self.settings.result_ttl)
            pipe.srem(waiting_key, *[r.call_id for r in shown])
            pipe.execute()
            for request in shown:
                self._record(request.call_id, route.channel, DIGEST_PREFIX + ts)
        if self.redis.scard(waiting_key):
            # Calls past DIGEST_MAX, or parked while this digest was posted: another digest.
            outbox.schedule(
                claimed,
                f"slack.digest.{digest_id}.{time.time():.3f}",
                DIGEST,
                time.time() + (route.digest_seconds or 0),
            )

    def _update_digest(self, channel: str, ts: str) -> None:
        raw: Any = self.redis.smembers(self.keys.slack_digest_message(channel, ts))
        requests = []
        for call_id in sorted(as_text(c) for c in raw):
            try:
                requests.append(self.approvals.get(call_id))
            except CallNotFoundError:
                continue
        if not requests:
            return
        requests.sort(key=lambda r: r.created_at)
        run_id = requests[0].run_id
        shown = blocks.digest_blocks(run_id, requests, self.settings.public_url)
        self.web.update(channel, ts, blocks.digest_text(run_id, len(requests)), shown)

    # -- a call is decided, expires or is cancelled -------------------------------------

    def _outcome(self, notice: Notice) -> Failure | None:
        messages = self._messages(notice.call_id)
        if POSTING in messages:
            return Failure("slack: the approval message is still being posted", 1.0)
        if not messages:
            return None
        request = self.approvals.get(notice.call_id)
        status = OUTCOMES.get(notice.type, request.status)
        by = notice.data.get("by")
        outcome = Outcome(
            status=status,
            by=by if isinstance(by, str) else None,
            reason=str(notice.data.get("reason") or "") or None,
            partial=notice.type == EventType.APPROVED.value
            and request.status is CallStatus.AWAITING_APPROVAL,
        )
        for channel, ts in messages.items():
            if ts.startswith(DIGEST_PREFIX):
                self._update_digest(channel, ts.removeprefix(DIGEST_PREFIX))
                continue
            text = blocks.fallback_text(request, outcome)
            self.web.update(
                channel,
                ts,
                text,
                blocks.approval_blocks(request, self.settings.public_url, outcome),
            )
        return None

    # -- records -------------------------------------------------------------------------

    def _messages(self, call_id: str) -> dict[str, str]:
        raw: Any = self.redis.hgetall(self.keys.slack_messages(call_id))
        return {as_text(k): as_text(v) for k, v in raw.items()}

    def _record(self, call_id: str, channel: str, ts: str) -> None:
        key = self.keys.slack_messages(call_id)
        pipe = self.redis.pipeline(transaction=True)
        pipe.hset(key, channel, ts)
        pipe.expire(key, self.settings.result_ttl)
        pipe.execute()


def _digest_id(run_id: str, channel: str) -> str:
    return hashlib.sha256(f"{run_id}\x00{channel}".encode()).hexdigest()[:24]
