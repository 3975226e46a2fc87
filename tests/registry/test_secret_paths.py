"""Secret detection at any depth, masking, and sealing/opening (no Redis needed)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, Field, SecretBytes, SecretStr

from toolq import ToolRegistry
from toolq.errors import ConfigurationError, SecretsError, SecretsKeyMissingError
from toolq.registry.secrets import MASK, SecretPaths
from toolq.secretbox import SecretBox, merge_edit, open_arguments, seal_arguments


class Credentials(BaseModel):
    user: str
    password: SecretStr


class Node(BaseModel):
    pin: SecretBytes
    children: list[Node] = []


@pytest.fixture
def tool() -> Any:
    registry = ToolRegistry()

    @registry.tool
    def deep(
        creds: Credentials,
        many: list[Credentials] = [],  # noqa: B006
        by_name: dict[str, SecretStr] = {},  # noqa: B006
        pair: tuple[str, SecretStr] | None = None,
        tree: Node | None = None,
        maybe: Credentials | None = None,
        note: str = Field("", json_schema_extra={"x-secret": True}),
        plain: str = "",
    ) -> str:
        return "ok"

    return deep


ARGS = {
    "creds": {"user": "u", "password": "p0"},
    "many": [{"user": "a", "password": "p1"}, {"user": "b", "password": "p2"}],
    "by_name": {"x": "p3"},
    "pair": ["k", "p4"],
    "tree": {"pin": "p5", "children": [{"pin": "p6", "children": [{"pin": "p7"}]}]},
    "maybe": None,
    "note": "p8",
    "plain": "visible",
}


def test_secrets_are_found_at_any_depth(tool: Any) -> None:
    assert sorted(tool.secret_paths.locate(ARGS)) == sorted(
        [
            ("creds", "password"),
            ("many", 0, "password"),
            ("many", 1, "password"),
            ("by_name", "x"),
            ("pair", 1),
            ("tree", "pin"),
            ("tree", "children", 0, "pin"),
            ("tree", "children", 0, "children", 0, "pin"),
            ("note",),
        ]
    )
    masked = tool.redact(ARGS)
    text = repr(masked)
    assert all(f"p{i}" not in text for i in range(9))
    assert masked["plain"] == "visible" and masked["maybe"] is None
    assert masked["many"][1] == {"user": "b", "password": MASK}
    assert tool.secret_fields == frozenset({"note"})
    assert ARGS["creds"]["password"] == "p0"  # copies


def test_arguments_that_do_not_validate_are_masked_conservatively(tool: Any) -> None:
    wrong = {"creds": "p0-as-a-string", "many": [["p1"]], "plain": "visible"}
    assert tool.redact(wrong, conservative=True) == {
        "creds": MASK,
        "many": [MASK],
        "plain": "visible",
    }


def test_raw_json_schemas_with_refs_and_patterns() -> None:
    paths = SecretPaths(
        {
            "type": "object",
            "$defs": {"Auth": {"type": "object", "properties": {"key": {"writeOnly": True}}}},
            "properties": {
                "auth": {"$ref": "#/$defs/Auth"},
                "env": {"type": "object", "patternProperties": {"^SECRET_": {"x-secret": True}}},
                "any": {"oneOf": [{"type": "integer"}, {"format": "password"}]},
            },
        }
    )
    found = paths.locate({"auth": {"key": 1}, "env": {"SECRET_A": "s", "PATH": "/bin"}, "any": 3})
    assert sorted(found, key=str) == sorted(
        [("auth", "key"), ("env", "SECRET_A"), ("any",)], key=str
    )
    assert not SecretPaths({"type": "object", "properties": {"a": {"type": "string"}}}).any


def test_sealed_round_trip_bound_to_call_tool_and_path(tool: Any) -> None:
    box = SecretBox(SecretBox.generate_key())
    stored = seal_arguments(box, tool, "call-1", ARGS)
    # Not a substring test: base64 ciphertext can contain "p0" by chance.
    assert stored["creds"]["password"] != "p0" and "$toolq_secret" in stored["creds"]["password"]
    assert "'p0'" not in repr(stored) and stored["plain"] == "visible"
    assert (
        stored["creds"]["password"]
        != seal_arguments(box, tool, "call-1", ARGS)["creds"]["password"]
    )  # a fresh nonce each time
    assert open_arguments(box, tool, "call-1", stored) == ARGS
    with pytest.raises(SecretsError, match="cannot be decrypted"):
        open_arguments(box, tool, "call-2", stored)
    swapped = {**stored, "many": [stored["many"][1], stored["many"][0]]}
    with pytest.raises(SecretsError):
        open_arguments(box, tool, "call-1", swapped)
    other = SecretBox(SecretBox.generate_key())
    with pytest.raises(SecretsError):
        open_arguments(other, tool, "call-1", stored)
    with pytest.raises(SecretsKeyMissingError, match="TOOLQ_SECRETS_KEY"):
        seal_arguments(None, tool, "call-1", ARGS)
    assert seal_arguments(None, tool, "call-1", {"creds": None, "plain": "x"}) == {
        "creds": None,
        "plain": "x",
    }
    with pytest.raises(SecretsError, match="stored unencrypted"):
        open_arguments(box, tool, "call-1", ARGS)


def test_an_edit_keeps_masked_secrets_and_seals_new_ones(tool: Any) -> None:
    box = SecretBox(SecretBox.generate_key())
    stored = seal_arguments(box, tool, "c", ARGS)
    edit = tool.redact(stored)
    edit["many"][1]["password"] = "new-pw"
    edit["plain"] = "changed"
    merged = merge_edit(box, tool, "c", edit, stored)
    assert merged["creds"]["password"] == stored["creds"]["password"]
    assert "new-pw" not in repr(merged)
    opened = open_arguments(box, tool, "c", merged)
    assert opened["many"][1]["password"] == "new-pw"
    assert opened["creds"]["password"] == "p0" and opened["plain"] == "changed"


def test_keys_must_be_32_bytes_of_urlsafe_base64() -> None:
    with pytest.raises(ConfigurationError, match="32 random bytes"):
        SecretBox("too-short")
    from cryptography.fernet import Fernet

    SecretBox(Fernet.generate_key().decode())  # a Fernet key is a valid key


def test_raw_schema_errors_do_not_quote_secret_values() -> None:
    from toolq.errors import InvalidArgumentsError
    from toolq.registry.schema import DictSchema

    schema = DictSchema(
        "raw",
        {
            "type": "object",
            "properties": {
                "auth": {
                    "type": "object",
                    "properties": {"pin": {"type": "string", "minLength": 8, "x-secret": True}},
                },
                "count": {"type": "integer"},
            },
        },
    )
    with pytest.raises(InvalidArgumentsError) as err:
        schema.validate({"auth": {"pin": "sk-123"}, "count": "many"})
    assert "sk-123" not in err.value.message and "sk-123" not in repr(err.value.details)
    assert "auth.pin: fails the 'minLength' check" in err.value.message
    assert "count: 'many' is not of type 'integer'" in err.value.message
