"""Key parsing (PEM and base64), signatures, and `toolq keys generate`."""

from __future__ import annotations

import json

import pytest
from cryptography.fernet import Fernet
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tests.cli.test_cli import toolq
from toolq.errors import ConfigurationError
from toolq.settings import Settings
from toolq.signing import (
    Signer,
    Verifier,
    generate_pair,
    parse_private_key,
    parse_public_keys,
    public_text,
    signer_for,
    verifier_for,
)


def pem_pair() -> tuple[str, str]:
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    public = (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )
    return private, public


def test_pem_and_base64_keys_sign_and_verify_interchangeably():
    pem_private, pem_public = pem_pair()
    raw_public = public_text(parse_private_key(pem_private).public_key())
    signed = Signer.from_text(pem_private).sign("decision", call_id="c", digest="d")
    assert Verifier.from_text(pem_public).payload(signed, "decision") == signed["payload"]
    assert Verifier.from_text(raw_public).payload(json.dumps(signed), "decision")
    b64_private, b64_public = generate_pair()
    signed = Signer.from_text(b64_private).sign("rule", run_id="r")
    assert Verifier.from_text(f" {b64_public} ").payload(signed, "rule")


def test_rotation_several_verify_keys():
    (old_private, old_public), (new_private, new_public) = generate_pair(), generate_pair()
    _, pem_public = pem_pair()
    verifier = Verifier.from_text(f"{old_public},{pem_public},{new_public}")
    assert len(verifier.keys) == 3
    for private in (old_private, new_private):
        assert verifier.payload(Signer.from_text(private).sign("decision", x=1), "decision")
    other_private, _ = generate_pair()
    assert (
        verifier.payload(Signer.from_text(other_private).sign("decision", x=1), "decision") is None
    )


def test_tampered_payload_wrong_kind_and_garbage_do_not_verify():
    private, public = generate_pair()
    verifier = Verifier.from_text(public)
    signed = Signer.from_text(private).sign("decision", call_id="c1", approvers=["alice"])
    tampered = {**signed, "payload": {**signed["payload"], "approvers": ["alice", "bob"]}}
    assert verifier.payload(tampered, "decision") is None
    assert verifier.payload(signed, "rule") is None  # a decision never passes as a rule
    for junk in (
        "",
        "not json",
        "[]",
        {"payload": {}},
        {"payload": signed["payload"], "sig": 5},
        {"payload": signed["payload"], "sig": "%%%"},
    ):
        assert verifier.payload(junk, "decision") is None


@pytest.mark.parametrize(
    "text", ["", "nope", "c2hvcnQ", "-----BEGIN PRIVATE KEY-----\nxx\n-----END PRIVATE KEY-----"]
)
def test_bad_keys_are_clear_configuration_errors(text):
    with pytest.raises(ConfigurationError, match="TOOLQ_APPROVAL_SIGNING_KEY"):
        parse_private_key(text)
    with pytest.raises(ConfigurationError, match="TOOLQ_APPROVAL_VERIFY_KEYS"):
        parse_public_keys(text or ",")


def test_settings_build_signer_and_verifier():
    private, public = generate_pair()
    assert signer_for(Settings()) is None and verifier_for(Settings()) is None
    settings = Settings(approval_signing_key=private, approval_verify_keys=public)
    signer, verifier = signer_for(settings), verifier_for(settings)
    assert signer is not None and verifier is not None
    assert verifier.payload(signer.sign("audit", a="1"), "audit")
    assert private not in repr(settings)


def test_keys_generate_prints_exports_and_json(settings):
    done = toolq("keys", "generate", settings=settings)
    assert done.returncode == 0, done.stderr
    exports = dict(
        line.removeprefix("export ").split("=", 1)
        for line in done.stdout.splitlines()
        if line.startswith("export ")
    )
    assert set(exports) == {
        "TOOLQ_APPROVAL_SIGNING_KEY",
        "TOOLQ_APPROVAL_VERIFY_KEYS",
        "TOOLQ_SECRETS_KEY",
    }
    signer = Signer.from_text(exports["TOOLQ_APPROVAL_SIGNING_KEY"])
    verifier = Verifier.from_text(exports["TOOLQ_APPROVAL_VERIFY_KEYS"])
    assert verifier.payload(signer.sign("decision", x=1), "decision")
    assert (
        Fernet(exports["TOOLQ_SECRETS_KEY"].encode()).decrypt(
            Fernet(exports["TOOLQ_SECRETS_KEY"].encode()).encrypt(b"s")
        )
        == b"s"
    )
    as_json = json.loads(toolq("keys", "generate", "--json", settings=settings).stdout)
    assert set(as_json) == set(exports) and as_json != exports


def test_worker_refuses_to_start_with_a_malformed_verify_key(settings):
    done = toolq(
        "worker",
        "--app",
        "tests.apps:registry",
        settings=settings,
        TOOLQ_APPROVAL_VERIFY_KEYS="garbage",
    )
    assert done.returncode == 2 and "TOOLQ_APPROVAL_VERIFY_KEYS" in done.stderr


def test_the_longest_note_allowed_still_signs_within_what_a_verifier_reads():
    """A resolution's note is signed. ``TOOLQ_MAX_REASON_BYTES`` stops at 64 KiB, where a
    note of 4-byte characters (each escaped to 12 bytes of JSON) still verifies; above it
    the setting is refused (before, a note past the 256 KiB a verifier reads was signed and
    then never verified)."""
    from pydantic import ValidationError

    from toolq.signing import SIGNED_MAX_BYTES

    most = Settings(max_reason_bytes=65536).max_reason_bytes
    with pytest.raises(ValidationError, match="less than or equal to 65536"):
        Settings(max_reason_bytes=most + 1)
    private, public = generate_pair()
    note = "\U0001f600" * (most // 4)  # the worst case: 4 UTF-8 bytes, 12 as JSON
    signed = json.dumps(Signer.from_text(private).sign("resolution", note=note, by="alice"))
    assert len(signed) < SIGNED_MAX_BYTES
    payload = Verifier.from_text(public).payload(signed, "resolution")
    assert payload is not None and payload["note"] == note
