"""Event-stream tickets: short-lived, read-only stand-ins for a token, for one run.

A browser's ``EventSource`` cannot send an ``Authorization`` header, and a token in a URL
ends up in logs and history. So the dashboard trades its token for a ticket
(``POST /v1/runs/{run_id}/events/ticket``) and opens ``.../events?ticket=...``. A ticket
is random; Redis holds only its SHA-256 with the run and the principal, for
``event_ticket_seconds``. It opens that run's event stream and nothing else.
"""

from __future__ import annotations

import hashlib
import json
import math
import secrets

import redis

from toolq.api.auth import AuthenticationError, Principal
from toolq.keys import Keys

PREFIX = "tqt_"


def _digest(ticket: str) -> str:
    return hashlib.sha256(ticket.encode()).hexdigest()


class TicketStore:
    """Issues and checks event-stream tickets."""

    def __init__(self, client: redis.Redis, keys: Keys, ttl: float) -> None:
        self.redis = client
        self.keys = keys
        self.ttl = ttl

    def issue(self, run_id: str, caller: Principal) -> str:
        """A new ticket for ``caller`` to read ``run_id``'s events."""
        ticket = PREFIX + secrets.token_urlsafe(32)
        grant = {
            "run_id": run_id,
            "principal": caller.name,
            "roles": sorted(caller.roles),
            "tenant": caller.tenant,
        }
        self.redis.set(
            self.keys.event_ticket(_digest(ticket)),
            json.dumps(grant),
            px=max(1, math.ceil(self.ttl * 1000)),
        )
        return ticket

    def redeem(self, ticket: str, run_id: str) -> Principal:
        """The principal a valid ticket for ``run_id`` stands for; else ``AuthenticationError``."""
        raw = self.redis.get(self.keys.event_ticket(_digest(ticket))) if ticket else None
        grant = json.loads(raw) if raw else None
        if grant is None or grant.get("run_id") != run_id:
            raise AuthenticationError("unknown or expired ticket for this run")
        tenant = grant.get("tenant")
        return Principal(
            str(grant["principal"]),
            frozenset(grant.get("roles", [])),
            str(tenant) if tenant is not None else None,
        )
