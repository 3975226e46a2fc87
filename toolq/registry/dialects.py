"""JSON Schema rewritten for providers that accept only part of it: OpenAI strict, Gemini.

Both functions take a schema as pydantic's ``model_json_schema`` writes it and return a new
one; the input is never changed. Schemas they cannot express raise RegistryError naming
the place (a JSON pointer).
"""

from __future__ import annotations

import copy
import json
from typing import Any

from toolq.errors import RegistryError

_NULL = {"type": "null"}


def openai_strict(schema: dict[str, Any]) -> dict[str, Any]:
    """Rewrite ``schema`` as OpenAI structured outputs (``strict: true``) require it.

    Every object gets ``additionalProperties: false`` and all its properties in
    ``required``; a property that was optional becomes nullable (``anyOf`` with
    ``{"type": "null"}``), so the model sends ``null`` where it would have left it out.
    ``default`` is removed, ``oneOf`` becomes ``anyOf``. ``$ref``s stay, with ``$defs`` at
    the root (OpenAI resolves them), except a ``$ref`` with sibling keywords, which OpenAI
    rejects: that one is inlined. Free-form objects (``additionalProperties`` other than
    false) cannot be strict and raise RegistryError.
    """
    root = copy.deepcopy(schema)
    strict: dict[str, Any] = _strict(root, root, "#")
    return strict


def _strict(node: Any, root: dict[str, Any], path: str) -> Any:
    if not isinstance(node, dict):
        return node
    node.pop("default", None)
    node.pop("discriminator", None)
    if isinstance(node.get("allOf"), list) and len(node["allOf"]) == 1:
        node = {**node.pop("allOf")[0], **node}
    ref = node.get("$ref")
    if isinstance(ref, str) and len(node) > 1:
        siblings = {key: value for key, value in node.items() if key != "$ref"}
        return _strict({**copy.deepcopy(_resolve(root, ref, path)), **siblings}, root, path)
    for key in ("$defs", "definitions"):
        if isinstance(node.get(key), dict):
            node[key] = {
                name: _strict(sub, root, f"{path}/{key}/{name}") for name, sub in node[key].items()
            }
    if node.get("type") == "object" or "properties" in node:
        if node.get("additionalProperties", False) is not False:
            raise RegistryError(
                f"OpenAI strict mode cannot express a free-form object at {path}; "
                "give it properties or use strict=False",
                path=path,
            )
        properties: dict[str, Any] = node.get("properties") or {}
        required = set(node.get("required") or ())
        node["properties"] = {
            name: _strict_property(sub, name in required, root, f"{path}/properties/{name}")
            for name, sub in properties.items()
        }
        node["required"] = list(properties)
        node["additionalProperties"] = False
    if isinstance(node.get("items"), dict):
        node["items"] = _strict(node["items"], root, f"{path}/items")
    if "oneOf" in node:
        node["anyOf"] = node.pop("oneOf")
    for key in ("anyOf", "allOf", "prefixItems"):
        if isinstance(node.get(key), list):
            node[key] = [_strict(sub, root, f"{path}/{key}/{i}") for i, sub in enumerate(node[key])]
    return node


def _strict_property(sub: Any, required: bool, root: dict[str, Any], path: str) -> Any:
    sub = _strict(sub, root, path)
    if required or _is_nullable(sub):
        return sub
    if isinstance(sub, dict) and set(sub) == {"anyOf"}:
        return {"anyOf": [*sub["anyOf"], dict(_NULL)]}
    return {"anyOf": [sub, dict(_NULL)]}


def _is_nullable(node: Any) -> bool:
    if not isinstance(node, dict):
        return False
    kind = node.get("type")
    return (
        kind == "null"
        or (isinstance(kind, list) and "null" in kind)
        or None in (node.get("enum") or ())
        or any(_is_nullable(sub) for sub in node.get("anyOf") or ())
    )


def _resolve(root: dict[str, Any], ref: str, path: str) -> dict[str, Any]:
    if not ref.startswith("#/"):
        raise RegistryError(f"cannot resolve $ref {ref!r} at {path}: only local refs", path=path)
    target: Any = root
    for part in ref[2:].split("/"):
        target = target.get(part) if isinstance(target, dict) else None
    if not isinstance(target, dict):
        raise RegistryError(f"cannot resolve $ref {ref!r} at {path}", path=path)
    return target


# -- Gemini -------------------------------------------------------------------------------

# Keywords google.genai.types.Schema takes as they are (its camelCase aliases).
_GEMINI_PLAIN = frozenset(
    {
        "description",
        "nullable",
        "default",
        "example",
        "minItems",
        "maxItems",
        "minLength",
        "maxLength",
        "minProperties",
        "maxProperties",
        "minimum",
        "maximum",
        "pattern",
    }
)
# The API refuses any other format on these types.
_GEMINI_FORMATS = {
    "string": {"enum", "date-time"},
    "number": {"float", "double"},
    "integer": {"int32", "int64"},
}


def gemini_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Rewrite ``schema`` into the OpenAPI 3.0 subset Gemini function declarations take.

    ``$ref``s are inlined (a recursive one raises RegistryError), ``anyOf [X, null]``
    becomes X with ``nullable: true``, ``const`` an enum of one, ``oneOf`` ``anyOf``,
    and types upper case (``OBJECT``, as google.genai.types.Type). Enums of other than
    strings, and formats Gemini refuses, move into the description; other unsupported
    keywords (``additionalProperties``, ``exclusiveMinimum``, ``uniqueItems``, ``title``,
    ...) are dropped, as are empty ``properties``, which the API refuses.
    """
    defs = {**schema.get("definitions", {}), **schema.get("$defs", {})}
    return _gemini(schema, defs, ())


def _gemini(node: dict[str, Any], defs: dict[str, Any], seen: tuple[str, ...]) -> dict[str, Any]:
    node = dict(node)
    out: dict[str, Any] = {}
    notes: list[str] = []
    ref = node.pop("$ref", None)
    if isinstance(ref, str):
        name = ref.rpartition("/")[2]
        if name in seen:
            chain = " -> ".join((*seen, name))
            raise RegistryError(f"recursive schema ({chain}) cannot be inlined for Gemini")
        if name not in defs:
            raise RegistryError(f"cannot resolve $ref {ref!r} for Gemini")
        out.update(_gemini(defs[name], defs, (*seen, name)))
    for sub in node.pop("allOf", None) or ():
        out.update(_gemini(sub, defs, seen))
    variants = node.pop("anyOf", None) or node.pop("oneOf", None)
    if variants:
        branches = [_gemini(sub, defs, seen) for sub in variants]
        kept = [branch for branch in branches if branch.get("type") != "NULL"]
        if len(kept) < len(branches):
            out["nullable"] = True
        if len(kept) == 1:
            out.update(kept[0])
        elif kept:
            out["anyOf"] = kept
    kind = node.pop("type", None)
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        if len(kinds) < len(kind):
            out["nullable"] = True
        if len(kinds) > 1:
            out["anyOf"] = [{"type": k.upper()} for k in kinds]
        kind = kinds[0] if len(kinds) == 1 else None if kinds else "null"
    if isinstance(kind, str):
        out["type"] = kind.upper()
    values = [node.pop("const")] if "const" in node else node.pop("enum", None)
    if isinstance(values, list):
        if None in values:
            out["nullable"] = True
            values = [value for value in values if value is not None]
        if all(isinstance(value, str) for value in values):
            out["enum"] = values
            out.setdefault("type", "STRING")
        else:
            notes.append("one of: " + ", ".join(json.dumps(value) for value in values))
    fmt = node.pop("format", None)
    if isinstance(fmt, str):
        if fmt in _GEMINI_FORMATS.get(str(kind).lower(), ()):
            out["format"] = fmt
        else:
            notes.append(f"format: {fmt}")
    properties = node.pop("properties", None)
    if isinstance(properties, dict) and properties:
        out["properties"] = {key: _gemini(sub, defs, seen) for key, sub in properties.items()}
        required = [key for key in node.pop("required", None) or () if key in properties]
        if required:
            out["required"] = required
    items = node.pop("items", None)
    prefix = node.pop("prefixItems", None)
    if isinstance(items, dict):
        out["items"] = _gemini(items, defs, seen)
    elif isinstance(prefix, list) and prefix:
        tuple_items = [_gemini(sub, defs, seen) for sub in prefix]
        same = all(sub == tuple_items[0] for sub in tuple_items)
        out["items"] = tuple_items[0] if same else {"anyOf": tuple_items}
    examples = node.pop("examples", None)
    if isinstance(examples, list) and examples and "example" not in node:
        out["example"] = examples[0]
    out.update({key: value for key, value in node.items() if key in _GEMINI_PLAIN})
    if out.get("default", False) is None:
        del out["default"]
    if notes:
        described = out.get("description")
        note = "; ".join(notes)
        out["description"] = f"{described} ({note})" if described else note[0].upper() + note[1:]
    return out
