"""``Sink``: an endpoint that delivers notices itself, through the outbox like any webhook.

A sink (the Slack app, ``toolq.slack``) gets each claimed delivery's ``Notice`` as
``Provenance`` vouched for it, and may schedule further deliveries of the same event to
itself (a reminder, an escalation: ``Outbox.schedule``), which come back with their
``Claimed.purpose``. Retries, backoff and the dead-letter list are the outbox's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from toolq.models import EventType
from toolq.webhooks.outbox import Claimed, Outbox
from toolq.webhooks.payload import Notice


@dataclass(frozen=True)
class Failure:
    """An attempt that did not deliver: why, and the earliest next attempt it asks for."""

    error: str
    retry_after: float | None = None
    """Seconds the receiver asked to wait (``Retry-After``); the backoff is never shorter."""


class Sink(Protocol):
    """An endpoint that delivers notices itself."""

    @property
    def id(self) -> str:
        """Stable name of the endpoint in delivery records."""
        ...

    @property
    def events(self) -> list[EventType]:
        """The event types it takes."""
        ...

    def deliver(self, claimed: Claimed, notice: Notice, outbox: Outbox) -> Failure | None:
        """Deliver one notice; None when done (or nothing was left to do)."""
        ...
