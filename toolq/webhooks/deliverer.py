"""``WebhookDeliverer``: a worker thread that fans out the outbox and POSTs deliveries.

Each attempt reads its event again and checks it (``toolq.webhooks.provenance``): one that
cannot be vouched for is never sent and goes to the dead-letter list at once. Each attempt
is signed anew (``toolq.webhooks.signing``); a 2xx answer ends a delivery,
anything else (or no answer within ``webhook_timeout``) schedules the next attempt after an
exponential backoff with jitter, up to ``webhook_max_attempts``.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Sequence

import httpx
import redis

from toolq.keys import Keys
from toolq.results.replication import ReplicaAcks
from toolq.settings import Settings, Webhook
from toolq.signing import verifier_for
from toolq.webhooks import payload
from toolq.webhooks.outbox import Claimed, Endpoint, Outbox
from toolq.webhooks.payload import Notice
from toolq.webhooks.provenance import Provenance, Unconfirmed, Unverified
from toolq.webhooks.signing import SIGNATURE_HEADER, sign
from toolq.webhooks.sink import Failure, Sink

log = logging.getLogger("toolq.webhooks")

IDLE_WAIT = 1.0
"""Longest the thread waits for new outbox entries before it looks at due deliveries."""
DUE_BATCH = 20
UNCONFIRMED_WAIT = 1.0
"""Seconds before a delivery of a final event the replicas did not confirm is tried again
(``TOOLQ_MIN_REPLICAS_ACK``; such a put-off does not count as an attempt)."""


class WebhookDeliverer(threading.Thread):
    """Delivers the notifications of ``settings.webhooks``; one per worker main process.

    It works over the worker's own Redis client and key names (its ``Backend``'s), as the
    outbox group's ``consumer``. ``sinks`` deliver notices themselves (``toolq.webhooks.sink``).
    """

    def __init__(
        self,
        redis_client: redis.Redis,
        keys: Keys,
        settings: Settings,
        consumer: str,
        sinks: Sequence[Sink] = (),
    ) -> None:
        super().__init__(name="toolq-webhooks", daemon=True)
        self.settings = settings
        self.hooks = {hook.id: hook for hook in settings.webhooks}
        self.sinks = {sink.id: sink for sink in sinks}
        self.outbox = Outbox(redis_client, keys, consumer)
        self.provenance = Provenance(
            redis_client, keys, verifier_for(settings), ReplicaAcks(settings, keys)
        )
        self.http = httpx.Client(timeout=settings.webhook_timeout, follow_redirects=False)
        self._stopping = threading.Event()

    def announce(self) -> None:
        """Keep the outbox taking the event types these endpoints want."""
        endpoints: list[Endpoint] = [*self.hooks.values(), *self.sinks.values()]
        events = {event.value for endpoint in endpoints for event in endpoint.events}
        self.outbox.announce(events, self.settings.webhook_hold_seconds)

    def run(self) -> None:
        """Fan out and deliver until stopped."""
        while not self._stopping.is_set():
            try:
                self.outbox.ensure_group()
                break
            except redis.RedisError as exc:
                log.warning("webhooks cannot reach Redis: %s", exc)
                self._stopping.wait(IDLE_WAIT)
        while not self._stopping.is_set():
            try:
                self.step()
            except redis.RedisError as exc:
                log.warning("webhooks cannot reach Redis: %s", exc)
                self._stopping.wait(IDLE_WAIT)
            except Exception:
                log.exception("webhook delivery step failed")
                self._stopping.wait(IDLE_WAIT)

    def step(self) -> None:
        """Wait (briefly) for outbox entries, fan them out, then attempt what is due."""
        now = time.time()
        next_due = self.outbox.next_due()
        wait = IDLE_WAIT if next_due is None else min(IDLE_WAIT, max(0.0, next_due - now))
        block_ms = int(wait * 1000)
        entries = self.outbox.take(block_ms if block_ms > 0 else None)
        endpoints: list[Endpoint] = [*self.hooks.values(), *self.sinks.values()]
        self.outbox.fan_out(entries, endpoints, time.time())
        for delivery_id in self.outbox.due(time.time(), DUE_BATCH):
            if self._stopping.is_set():
                return
            self.attempt(delivery_id)

    def attempt(self, delivery_id: str) -> None:
        """One attempt at one delivery, if no other worker has taken it."""
        now = time.time()
        # Claimed past the attempt's longest end: if this process dies during it, the
        # delivery is due again shortly after.
        until = now + 2 * self.settings.webhook_timeout + 5
        claimed = self.outbox.claim(delivery_id, now, until)
        if claimed is None:
            return
        hook = self.hooks.get(claimed.hook_id) or self.sinks.get(claimed.hook_id)
        if hook is None:
            log.warning(
                "delivery %s: endpoint %s is no longer configured", delivery_id, claimed.hook_id
            )
            self.outbox.delivered(delivery_id)
            return
        try:
            notice = self.provenance.notice(claimed, {event.value for event in hook.events})
        except Unverified as exc:
            log.warning("delivery %s to endpoint %s refused: %s", delivery_id, hook.id, exc)
            self.outbox.give_up(claimed, f"unverified: {exc}")
            return
        except Unconfirmed as exc:  # not sent: tried again shortly, the attempt not counted
            log.info("delivery %s to endpoint %s put off: %s", delivery_id, hook.id, exc)
            self.outbox.postpone(delivery_id, time.time() + UNCONFIRMED_WAIT, f"{exc}")
            return
        if isinstance(hook, Webhook):
            error = self.post(hook, notice)
            failure = None if error is None else Failure(error)
        else:
            failure = hook.deliver(claimed, notice, self.outbox)
        if failure is None:
            self.outbox.delivered(delivery_id)
        else:
            self._failed(claimed, hook.id, failure)

    def _failed(self, claimed: Claimed, hook_id: str, failure: Failure) -> None:
        """A failed attempt: given up after ``webhook_max_attempts``, else tried again."""
        delivery_id = claimed.delivery_id
        if claimed.attempts >= self.settings.webhook_max_attempts:
            log.error(
                "delivery %s to endpoint %s given up after %d attempts: %s",
                delivery_id,
                hook_id,
                claimed.attempts,
                failure.error,
            )
            self.outbox.give_up(claimed, failure.error)
        else:
            delay = max(self.backoff(claimed.attempts), failure.retry_after or 0.0)
            log.warning(
                "delivery %s to endpoint %s failed (attempt %d): %s; retrying in %.1f s",
                delivery_id,
                hook_id,
                claimed.attempts,
                failure.error,
                delay,
            )
            self.outbox.retry_at(delivery_id, time.time() + delay, failure.error)

    def backoff(self, attempts: int) -> float:
        """Delay after the ``attempts``-th failed attempt."""
        s = self.settings
        base = min(s.webhook_backoff * 2.0 ** (attempts - 1), s.webhook_backoff_max)
        return base * random.uniform(0.8, 1.2)  # jitter, not crypto

    def post(self, hook: Webhook, notice: Notice) -> str | None:
        """Send one delivery; None when the endpoint accepted it, else what went wrong."""
        body = payload.body(notice, hook.format, self.settings.public_url)
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "toolq-webhooks",
            "X-Toolq-Event": notice.type,
            "X-Toolq-Delivery": notice.delivery_id,
        }
        if hook.secret is not None:
            headers[SIGNATURE_HEADER] = sign(hook.secret.get_secret_value(), body)
        try:
            response = self.http.post(hook.url, content=body, headers=headers)
        except httpx.HTTPError as exc:
            # Not the exception text: it may quote the URL, which can hold a token.
            return type(exc).__name__
        if 200 <= response.status_code < 300:
            return None
        return f"HTTP {response.status_code}"

    def stop(self) -> None:
        """Stop after the current attempt."""
        self._stopping.set()
