"""Webhook deliveries: WEBHOOK_CLAIM."""

from __future__ import annotations

from typing import Any

from toolq.keys import Keys
from toolq.results.connection import as_text
from toolq.results.runner import Invocation, Script


class WebhookClaim(Script[dict[str, str] | None]):
    """A due webhook delivery taken for one attempt (``webhook_claim.lua``); its fields."""

    file = "webhook_claim.lua"

    def __call__(
        self, *, keys: Keys, delivery_id: str, now: str, until: str
    ) -> Invocation[dict[str, str] | None]:
        """An invocation: KEYS and ARGV as the header of ``webhook_claim.lua`` lists them."""
        return self.invoke(
            keys={"due": keys.webhook_due, "delivery": keys.webhook_delivery(delivery_id)},
            argv={"delivery_id": delivery_id, "now": now, "claimed_until": until},
        )

    def parse(self, reply: Any) -> dict[str, str] | None:
        """The typed outcome of a reply."""
        if not reply:
            return None
        return {as_text(reply[i]): as_text(reply[i + 1]) for i in range(0, len(reply), 2)}


WEBHOOK_CLAIM = WebhookClaim()
