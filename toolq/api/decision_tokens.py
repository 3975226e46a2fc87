"""Decision tokens: one approver's one decision on one call, carried by someone else's process.

An app that collects a person's decision in its own UI (or a notification link) should not
hold that person's API token. The person (an authenticated approver) asks the API for a
decision token instead (``POST /v1/approvals/{call_id}/decision-token``); it binds the call,
the digest of its arguments as they were then, that approver (and their tenant) and an
expiry, under an HMAC-SHA256 whose key is derived from the API's approval signing key. So
only a process holding that key mints one: not a Redis writer, not the agent process that
carries it. Its holder makes one decision on that call (``/v1/decisions/{call_id}/...``),
recorded as the approver it names.

A token is spent by ``SET NX`` of its nonce (atomic: of any number of concurrent uses one
wins). A use refused before anything was decided (a stale digest, an edit that does not
validate, a call decided meanwhile) gives it back; Redis keeps the spent mark past the
token's expiry. Deleting that mark (a Redis writer could) lets the token be tried again, but
it still decides only its own call, as its own approver: the quorum counts that approver once.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import math
import secrets
import time
from dataclasses import dataclass

import redis
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from toolq.api.auth import AuthenticationError, Principal
from toolq.dispatch.approval_client import DECISION_TOKEN_PREFIX as PREFIX
from toolq.errors import ConfigurationError
from toolq.keys import Keys
from toolq.settings import Settings
from toolq.signing import canonical, parse_private_key

VERSION = 1
_INFO = b"toolq decision tokens v1"


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def token_key(settings: Settings) -> bytes | None:
    """The HMAC key of decision tokens, derived from the approval signing key (or None)."""
    text = settings.approval_signing_key
    if text is None:
        return None
    raw = parse_private_key(text.get_secret_value()).private_bytes(
        serialization.Encoding.Raw,
        serialization.PrivateFormat.Raw,
        serialization.NoEncryption(),
    )
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_INFO).derive(raw)


@dataclass(frozen=True)
class DecisionGrant:
    """What a valid decision token lets its holder do: decide ``call_id`` as ``approver``."""

    call_id: str
    digest: str
    """The call's digest (tool and arguments) when the token was issued; a changed call is
    refused."""
    approver: str
    tenant: str | None
    expires_at: float
    nonce: str


class DecisionTokens:
    """Issues, reads and spends decision tokens."""

    def __init__(self, settings: Settings) -> None:
        self.key = token_key(settings)
        self.ttl = settings.decision_token_seconds

    def issue(self, call_id: str, digest: str, approver: Principal) -> str:
        """A token for ``approver``'s one decision on ``call_id`` as its arguments are now."""
        if self.key is None:
            raise ConfigurationError(
                "decision tokens need TOOLQ_APPROVAL_SIGNING_KEY on the API: their authority "
                "comes from it"
            )
        payload = {
            "v": VERSION,
            "call": call_id,
            "digest": digest,
            "by": approver.name,
            "tenant": approver.tenant,
            "exp": round(time.time() + self.ttl, 3),
            "n": secrets.token_urlsafe(16),
        }
        body = canonical(payload)
        return f"{PREFIX}{_b64(body)}.{_b64(self._mac(body))}"

    def read(self, token: str, call_id: str) -> DecisionGrant:
        """The grant of a valid, unexpired token for ``call_id``; else ``AuthenticationError``."""
        payload = self._payload(token)
        if payload is None or payload.get("v") != VERSION:
            raise AuthenticationError("not a decision token this API issued")
        if payload.get("call") != call_id:
            raise AuthenticationError(f"this decision token is not for call {call_id}")
        expires_at = payload["exp"]
        if not isinstance(expires_at, int | float) or expires_at <= time.time():
            raise AuthenticationError("this decision token has expired; ask for a new one")
        tenant = payload.get("tenant")
        return DecisionGrant(
            call_id=call_id,
            digest=str(payload["digest"]),
            approver=str(payload["by"]),
            tenant=str(tenant) if tenant is not None else None,
            expires_at=float(expires_at),
            nonce=str(payload["n"]),
        )

    def spend(self, grant: DecisionGrant, client: redis.Redis, keys: Keys) -> None:
        """Mark the token used, atomically; ``AuthenticationError`` if it was already."""
        # kept a minute past the expiry, so the mark outlives every use of the token
        ttl_ms = max(1, math.ceil((grant.expires_at - time.time() + 60) * 1000))
        if not client.set(keys.decision_token_spent(grant.nonce), "1", nx=True, px=ttl_ms):
            raise AuthenticationError("this decision token was used already")

    def refund(self, grant: DecisionGrant, client: redis.Redis, keys: Keys) -> None:
        """Give a spent token back (its use decided nothing)."""
        client.delete(keys.decision_token_spent(grant.nonce))

    def _mac(self, body: bytes) -> bytes:
        assert self.key is not None
        return hmac.new(self.key, body, hashlib.sha256).digest()

    def _payload(self, token: str) -> dict[str, object] | None:
        if self.key is None or not token.startswith(PREFIX):
            return None
        body_text, _, mac_text = token.removeprefix(PREFIX).partition(".")
        try:
            body, mac = _unb64(body_text), _unb64(mac_text)
        except (binascii.Error, ValueError):
            return None
        if not hmac.compare_digest(mac, self._mac(body)):
            return None
        try:
            payload = json.loads(body)
        except ValueError:
            return None
        fields = ("call", "digest", "by", "exp", "n")
        if not isinstance(payload, dict) or not all(k in payload for k in fields):
            return None
        return payload
