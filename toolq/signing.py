"""Ed25519 signatures over approvals, run rules and audit entries.

Redis is not an authority: anyone holding its credentials can write any record. Deciding
processes (API, CLI, an approver's ``Client``) hold the private key
(``TOOLQ_APPROVAL_SIGNING_KEY``); workers hold only public keys
(``TOOLQ_APPROVAL_VERIFY_KEYS``, several during a rotation) and run a gated call only with
a valid signature for exactly what they are about to run.

A signed object is ``{"payload": {...}, "sig": "<base64url>"}``; the signature covers the
canonical bytes of the payload: JSON with sorted keys, no spaces, UTF-8, and a version
``v`` and ``kind`` inside, so a signature made for one kind of object never verifies as
another, nor one made under an older layout of the same kind as the current one.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from typing import Any, Literal

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from toolq.errors import ConfigurationError
from toolq.models import CallEnvelope, RiskLevel
from toolq.settings import Settings

Kind = Literal["decision", "approval", "rule", "audit", "resolution", "undo"]
"""``decision``: the final approve/deny; ``approval``: one approver's part of a quorum;
``rule``: a sticky rule or run mode that loosens the gate; ``audit``: an audit entry;
``resolution``: a person's outcome for a call of unknown outcome (``toolq.approvals.resolving``);
``undo``: a person's approval to run a gated call's undo handler (``toolq.approvals.undoing``)."""
SIGNED_MAX_BYTES = 256 * 1024
"""Longest stored text taken for a signed object: a longer one (a Redis writer's) is no
signature, and is not parsed."""
VERSIONS: dict[Kind, int] = {
    "decision": 2,
    "approval": 2,
    "rule": 2,
    "audit": 1,
    "resolution": 1,
    "undo": 1,
}
"""The payload layout each kind is signed and verified under. ``decision`` and ``approval``
2 also bind the call's risk, submitter and tenant (``toolq.approvals.authority``); a version
1 decision (signed before) is refused. ``rule`` 2 binds the run owner's submitter and tenant
(a version 1 rule, signed before, is refused). Audit entries keep version 1: old entries
verify."""


def canonical(payload: Mapping[str, Any]) -> bytes:
    """The bytes a signature covers."""
    return json.dumps(
        payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode()


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _raw_key(text: str, what: str) -> bytes:
    try:
        raw = _unb64(text.strip())
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != 32:
        raise ConfigurationError(
            f"{what} is neither PEM nor URL-safe base64 of a raw 32-byte Ed25519 key "
            "(`toolq keys generate` prints a valid pair)"
        )
    return raw


def parse_private_key(text: str) -> Ed25519PrivateKey:
    """An Ed25519 private key from PEM (PKCS#8) or URL-safe base64 of its 32 raw bytes."""
    what = "TOOLQ_APPROVAL_SIGNING_KEY"
    text = text.strip()
    if text.startswith("-----BEGIN"):
        try:
            key = serialization.load_pem_private_key(text.encode(), password=None)
        except (ValueError, TypeError) as exc:
            raise ConfigurationError(f"{what}: unreadable PEM private key ({exc})") from None
        if not isinstance(key, Ed25519PrivateKey):
            raise ConfigurationError(f"{what}: PEM key is {type(key).__name__}, not Ed25519")
        return key
    return Ed25519PrivateKey.from_private_bytes(_raw_key(text, what))


def parse_public_key(text: str) -> Ed25519PublicKey:
    """An Ed25519 public key from PEM (SubjectPublicKeyInfo) or URL-safe base64 raw bytes."""
    what = "a key in TOOLQ_APPROVAL_VERIFY_KEYS"
    text = text.strip()
    if text.startswith("-----BEGIN"):
        try:
            key = serialization.load_pem_public_key(text.encode())
        except (ValueError, TypeError) as exc:
            raise ConfigurationError(f"{what}: unreadable PEM public key ({exc})") from None
        if not isinstance(key, Ed25519PublicKey):
            raise ConfigurationError(f"{what}: PEM key is {type(key).__name__}, not Ed25519")
        return key
    return Ed25519PublicKey.from_public_bytes(_raw_key(text, what))


def parse_public_keys(text: str) -> list[Ed25519PublicKey]:
    """Comma-separated public keys (PEM blocks contain no commas)."""
    keys = [parse_public_key(part) for part in text.split(",") if part.strip()]
    if not keys:
        raise ConfigurationError("TOOLQ_APPROVAL_VERIFY_KEYS is set but names no key")
    return keys


def public_text(key: Ed25519PublicKey) -> str:
    """URL-safe base64 of a public key's raw bytes."""
    return _b64(key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw))


def private_text(key: Ed25519PrivateKey) -> str:
    """URL-safe base64 of a private key's raw bytes."""
    raw = key.private_bytes(
        serialization.Encoding.Raw,
        serialization.PrivateFormat.Raw,
        serialization.NoEncryption(),
    )
    return _b64(raw)


def generate_pair() -> tuple[str, str]:
    """A fresh ``(signing key, verify key)``, both URL-safe base64 of the raw bytes."""
    key = Ed25519PrivateKey.generate()
    return private_text(key), public_text(key.public_key())


def call_facts(envelope: CallEnvelope, risk: RiskLevel, digest: str) -> dict[str, Any]:
    """The facts of a call an approval is signed over, beside its own fields."""
    return {
        "call_id": envelope.call_id,
        "run_id": envelope.run_id,
        "tool": envelope.name,
        "risk": risk.value,
        "digest": digest,
        "submitter": envelope.principal,
        "tenant": envelope.tenant,
    }


class Signer:
    """Signs payloads with the approvers' private key."""

    def __init__(self, key: Ed25519PrivateKey) -> None:
        self.key = key

    @classmethod
    def from_text(cls, text: str) -> Signer:
        """A signer for a key in either accepted form."""
        return cls(parse_private_key(text))

    def sign(self, kind: Kind, **fields: Any) -> dict[str, Any]:
        """``{"payload": ..., "sig": ...}`` for a payload of ``kind``."""
        payload = {**fields, "v": VERSIONS[kind], "kind": kind}
        return {"payload": payload, "sig": _b64(self.key.sign(canonical(payload)))}

    def signature(self, payload: Mapping[str, Any]) -> str:
        """The bare signature of an exact payload (audit entries carry their own fields)."""
        return _b64(self.key.sign(canonical(payload)))


class Verifier:
    """Checks signatures against any of the configured public keys (rotation)."""

    def __init__(self, keys: list[Ed25519PublicKey]) -> None:
        self.keys = keys

    @classmethod
    def from_text(cls, text: str) -> Verifier:
        """A verifier for comma-separated keys in either accepted form."""
        return cls(parse_public_keys(text))

    def valid(self, payload: Mapping[str, Any], signature: str) -> bool:
        """True when ``signature`` over ``payload`` verifies with one of the keys."""
        try:
            raw = _unb64(signature)
            data = canonical(payload)
        except (binascii.Error, ValueError, TypeError):
            return False
        for key in self.keys:
            try:
                key.verify(raw, data)
                return True
            except InvalidSignature:
                continue
        return False

    def approves(self, facts: Mapping[str, Any], approval: Mapping[str, Any]) -> bool:
        """True when one approver's part of a quorum is signed over ``facts`` (``call_facts``).

        ``approval`` is as a record keeps it: ``{"by", "ts", "sig", ...}``.
        """
        signature = approval.get("sig")
        payload = {
            **facts,
            "by": approval.get("by"),
            "ts": approval.get("ts"),
            "v": VERSIONS["approval"],
            "kind": "approval",
        }
        return isinstance(signature, str) and self.valid(payload, signature)

    def payload(self, signed: Any, kind: Kind) -> dict[str, Any] | None:
        """The payload of a signed object of ``kind`` if its signature is valid, else None."""
        parts = _signed_parts(signed)
        if parts is None:
            return None
        payload, signature = parts
        if payload.get("v") != VERSIONS[kind] or payload.get("kind") != kind:
            return None
        return payload if self.valid(payload, signature) else None

    def earlier_version(self, signed: Any, kind: Kind) -> int | None:
        """The version of a validly signed ``kind`` older than this release's, else None.

        Only to say why it is refused: a trusted key signed it, in an earlier layout.
        """
        parts = _signed_parts(signed)
        if parts is None:
            return None
        payload, signature = parts
        version = payload.get("v")
        if payload.get("kind") != kind or not isinstance(version, int) or isinstance(version, bool):
            return None
        if version >= VERSIONS[kind] or not self.valid(payload, signature):
            return None
        return version


def _signed_parts(signed: Any) -> tuple[dict[str, Any], str] | None:
    """``(payload, signature)`` of a signed object (or its JSON text), unverified; else None."""
    if isinstance(signed, str | bytes):
        if len(signed) > SIGNED_MAX_BYTES:
            return None
        try:
            signed = json.loads(signed)
        except (ValueError, RecursionError):  # a Redis writer's text: no signature
            return None
    if not isinstance(signed, dict):
        return None
    payload, signature = signed.get("payload"), signed.get("sig")
    if not isinstance(payload, dict) or not isinstance(signature, str):
        return None
    return payload, signature


def signer_for(settings: Settings) -> Signer | None:
    """The signer of a deciding process, or None when it holds no signing key."""
    key = settings.approval_signing_key
    return Signer.from_text(key.get_secret_value()) if key is not None else None


def verifier_for(settings: Settings) -> Verifier | None:
    """The verifier of a worker, or None when it has no verify keys."""
    keys = settings.approval_verify_keys
    return Verifier.from_text(keys) if keys and keys.strip() else None
