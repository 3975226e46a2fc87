"""``SecretBox``: secret argument values encrypted in stored calls, opened only to run them.

A secret value is stored as ``{"$toolq_secret": "v1.<base64url(nonce + ciphertext)>"}``:
AES-256-GCM of its JSON under ``TOOLQ_SECRETS_KEY``, with the call id, tool name and the
value's path as associated data, so a ciphertext copied into another call, tool or argument
does not decrypt. Values are sealed once, at dispatch (or by the approver's process for an
edited value), and never re-sealed: the approval digest covers them as stored.

The same box seals the credentials of upstream MCP servers (``toolq keys seal``): a value
bound to its server, tenant and name, written ``toolq-sealed:v1.…`` in the server's
configuration and opened only by the worker that connects.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
from typing import TYPE_CHECKING, Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from toolq.errors import ConfigurationError, SecretsError, SecretsKeyMissingError
from toolq.registry.secrets import (
    MASK,
    SEALED,
    Path,
    get_path,
    is_sealed,
    path_text,
    replace_at,
)
from toolq.upstreams import SEALED_PREFIX

if TYPE_CHECKING:
    from toolq.registry.tool import Tool
    from toolq.settings import Settings

_VERSION = "v1."
_NONCE_BYTES = 12
_CREDENTIAL = "mcp-server:"
"""Stands for the call id in a credential's associated data (no call id looks like it)."""
MISSING_KEY = (
    "this call has secret arguments and this process has no TOOLQ_SECRETS_KEY to encrypt "
    "them with; set TOOLQ_SECRETS_KEY (32 random bytes, URL-safe base64, e.g. from "
    "`toolq keys generate`) on dispatchers and workers"
)


def _context(call_id: str, tool: str, path: Path) -> bytes:
    return f"toolq-secret:v1\n{call_id}\n{tool}\n{path_text(path)}".encode()


class SecretBox:
    """Encrypts and decrypts single secret values bound to (call, tool, path)."""

    def __init__(self, key: str) -> None:
        try:
            raw = base64.urlsafe_b64decode(key.strip().encode())
        except (binascii.Error, ValueError):
            raw = b""
        if len(raw) != 32:
            raise ConfigurationError(
                "TOOLQ_SECRETS_KEY must be 32 random bytes in URL-safe base64 (44 characters, "
                "as `toolq keys generate` or Fernet.generate_key() prints)"
            )
        self._aead = AESGCM(raw)
        # A key of its own for MACs, derived from the same secret: never the AEAD key itself.
        self._mac_key = hmac.new(raw, b"toolq-mac:v1", hashlib.sha256).digest()

    @classmethod
    def from_settings(cls, settings: Settings) -> SecretBox | None:
        """The box of ``TOOLQ_SECRETS_KEY``, or ``None`` when no key is set (or it is empty)."""
        key = settings.secrets_key.get_secret_value() if settings.secrets_key else ""
        return cls(key) if key else None

    @staticmethod
    def generate_key() -> str:
        """A new key: 32 random bytes, URL-safe base64."""
        return base64.urlsafe_b64encode(os.urandom(32)).decode()

    def mac(self, data: bytes) -> str:
        """HMAC-SHA256 of ``data`` (hex) under a key derived from ``TOOLQ_SECRETS_KEY``.

        For a value Redis may hold that must not reveal what it was computed over (a guess
        of a secret cannot be checked against it without the key).
        """
        return hmac.new(self._mac_key, data, hashlib.sha256).hexdigest()

    def seal(self, value: Any, call_id: str, tool: str, path: Path) -> dict[str, str]:
        """``{"$toolq_secret": token}`` for one JSON value."""
        nonce = os.urandom(_NONCE_BYTES)
        plain = json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
        sealed = self._aead.encrypt(nonce, plain, _context(call_id, tool, path))
        return {SEALED: _VERSION + base64.urlsafe_b64encode(nonce + sealed).decode()}

    def open(self, value: dict[str, str], call_id: str, tool: str, path: Path) -> Any:
        """The JSON value inside a sealed one; ``SecretsError`` if it is not ours."""
        where = path_text(path)
        token = value[SEALED]
        try:
            if not token.startswith(_VERSION):
                raise ValueError(token[:8])
            blob = base64.urlsafe_b64decode(token[len(_VERSION) :].encode())
            nonce, sealed = blob[:_NONCE_BYTES], blob[_NONCE_BYTES:]
            plain = self._aead.decrypt(nonce, sealed, _context(call_id, tool, path))
            return json.loads(plain)
        except (InvalidTag, ValueError, binascii.Error):
            raise SecretsError(
                f"secret argument {where!r} cannot be decrypted: sealed with another "
                "TOOLQ_SECRETS_KEY, or moved from another call, tool or argument",
                path=where,
            ) from None

    def seal_credential(self, value: str, server: str, scope: str, name: str) -> str:
        """``value`` sealed for one credential of an upstream MCP server: ``toolq-sealed:...``.

        ``scope`` is the tenant entry (``""`` for the server's own headers and env), ``name``
        the credential (``header:Authorization``, ``env:API_KEY``).
        """
        return SEALED_PREFIX + self.seal(value, _CREDENTIAL + server, scope, (name,))[SEALED]

    def open_credential(self, sealed: str, server: str, scope: str, name: str) -> str:
        """The plaintext of a ``seal_credential`` value.

        ``SecretsError`` if it was sealed with another key, or for another server, tenant or
        name.
        """
        token = {SEALED: sealed.removeprefix(SEALED_PREFIX)}
        try:
            value = self.open(token, _CREDENTIAL + server, scope, (name,))
        except SecretsError:
            value = None
        if not isinstance(value, str):
            raise SecretsError(
                "sealed with another TOOLQ_SECRETS_KEY, or for another server, tenant or name"
            )
        return value


def seal_arguments(
    box: SecretBox | None, tool: Tool, call_id: str, arguments: dict[str, Any]
) -> dict[str, Any]:
    """Arguments as stored: every secret value of ``tool``'s schema sealed.

    Raises ``SecretsKeyMissingError`` when there is a secret to seal and no key.
    """
    paths = tool.secret_paths.locate(arguments)
    if not paths:
        return arguments
    if box is None:
        raise SecretsKeyMissingError(MISSING_KEY, tool=tool.name)
    sealed: dict[str, Any] = replace_at(
        arguments, paths, lambda path, value: box.seal(value, call_id, tool.name, path)
    )
    return sealed


def open_arguments(
    box: SecretBox | None, tool: Tool, call_id: str, stored: dict[str, Any]
) -> dict[str, Any]:
    """Plaintext arguments of a stored call, for validation and the handler only.

    A secret value stored in plaintext is refused: something other than a dispatcher
    wrote it.
    """
    paths = tool.secret_paths.locate(stored)
    if not paths:
        return stored
    for path in paths:
        if not is_sealed(get_path(stored, path)):
            raise SecretsError(
                f"secret argument {path_text(path)!r} is stored unencrypted; refusing to run it",
                path=path_text(path),
            )
    if box is None:
        raise SecretsKeyMissingError(MISSING_KEY, tool=tool.name)
    opened: dict[str, Any] = replace_at(
        stored, paths, lambda path, value: box.open(value, call_id, tool.name, path)
    )
    return opened


def merge_edit(
    box: SecretBox | None,
    tool: Tool,
    call_id: str,
    edited: dict[str, Any],
    stored: dict[str, Any],
) -> dict[str, Any]:
    """An approver's edited arguments as stored.

    A secret left as ``MASK`` keeps the stored (sealed) value at the same path; a new value
    is sealed here.
    """

    def keep_or_seal(path: Path, value: Any) -> Any:
        if value == MASK:
            try:
                original = get_path(stored, path)
            except (KeyError, IndexError, TypeError):
                original = None
            if is_sealed(original):
                return original
        if box is None:
            raise SecretsKeyMissingError(MISSING_KEY, tool=tool.name)
        return box.seal(value, call_id, tool.name, path)

    merged: dict[str, Any] = replace_at(edited, tool.secret_paths.locate(edited), keep_or_seal)
    return merged


__all__ = ["MISSING_KEY", "SecretBox", "merge_edit", "open_arguments", "seal_arguments"]
