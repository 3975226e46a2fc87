"""HMAC-SHA256 signatures of webhook deliveries: ``X-Toolq-Signature: t=<unix>,v1=<hex>``.

``v1`` is the HMAC of ``"<t>.<body>"`` under the endpoint's secret. Each attempt is signed
anew, so ``t`` is the time it was sent: a receiver rejects a ``t`` outside its replay window
(``REPLAY_WINDOW``) and drops a ``X-Toolq-Delivery`` id it has already handled.
"""

from __future__ import annotations

import hashlib
import hmac
import time

SIGNATURE_HEADER = "X-Toolq-Signature"
REPLAY_WINDOW = 300.0
"""Seconds either side of now a signature's timestamp may be (the default of the verifier)."""


def _mac(secret: str, timestamp: int, body: bytes) -> str:
    message = str(timestamp).encode() + b"." + body
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def sign(secret: str, body: bytes, timestamp: int | None = None) -> str:
    """The ``X-Toolq-Signature`` value for ``body`` sent at ``timestamp`` (default: now)."""
    t = int(time.time()) if timestamp is None else timestamp
    return f"t={t},v1={_mac(secret, t, body)}"


def verify_signature(
    secret: str,
    header: str | None,
    body: bytes,
    *,
    tolerance: float = REPLAY_WINDOW,
    now: float | None = None,
) -> bool:
    """True if ``header`` signs exactly ``body`` with ``secret`` within ``tolerance`` seconds.

    For receivers: call it on the raw request body, before parsing it.
    """
    if not header:
        return False
    parts: dict[str, list[str]] = {}
    for item in header.split(","):
        key, _, value = item.strip().partition("=")
        parts.setdefault(key, []).append(value)
    try:
        timestamp = int(parts["t"][0])
    except (KeyError, ValueError):
        return False
    current = time.time() if now is None else now
    if abs(current - timestamp) > tolerance:
        return False
    expected = _mac(secret, timestamp, body)
    # as bytes: compare_digest raises on str with non-ASCII characters (a hostile header)
    return any(
        hmac.compare_digest(expected.encode(), given.encode()) for given in parts.get("v1", [])
    )
