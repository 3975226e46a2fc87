"""Notifications of call events to HTTP endpoints (``TOOLQ_WEBHOOKS``), from a Redis outbox."""

from toolq.webhooks.signing import REPLAY_WINDOW, SIGNATURE_HEADER, sign, verify_signature

__all__ = ["REPLAY_WINDOW", "SIGNATURE_HEADER", "sign", "verify_signature"]
