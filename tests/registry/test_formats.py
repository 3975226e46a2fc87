"""Tool definitions per provider, checked by the providers' own SDK types."""

from __future__ import annotations

import copy
import enum
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

import jsonschema
import mcp.types as mcp_types
import pytest
from anthropic.types import ToolParam
from google.genai import types as genai
from openai.types.chat import ChatCompletionFunctionToolParam
from openai.types.responses import FunctionToolParam
from pydantic import BaseModel, Field, SecretStr, TypeAdapter

from toolq.errors import RegistryError
from toolq.models import ProviderFormat
from toolq.registry.formats import tool_schema, tool_schemas

# -- schemas as the registry makes them --------------------------------------------------------


class Color(enum.StrEnum):
    RED = "red"
    BLUE = "blue"


class Priority(int, enum.Enum):
    LOW = 1
    HIGH = 2


class Address(BaseModel):
    street: str = Field(description="Street and number")
    zip_code: str | None = None


class SearchArgs(BaseModel):
    query: str = Field(description="What to look for", min_length=1, max_length=200)
    limit: int = Field(10, ge=1, le=100)
    ratio: float = Field(0.5, gt=0, lt=1)
    mode: Literal["fast", "thorough"] = "fast"
    kind: Literal["search"] = "search"
    color: Color | None = None
    priority: Priority = Priority.LOW
    address: Address = Field(description="Where to search")
    stops: list[Address] = []
    tags: set[str] = set()
    title: str | None = Field(None, description="A property named like a keyword")
    contact: str = Field("a@b.example", json_schema_extra={"format": "email"})
    token: SecretStr = SecretStr("x")
    pair: tuple[int, str] | None = None
    amount: int | str = 1


class WithMap(BaseModel):
    counts: dict[str, int]


class Tree(BaseModel):
    label: str
    children: list[Tree] = []


class TreeArgs(BaseModel):
    tree: Tree


class Empty(BaseModel):
    pass


class Forecast(BaseModel):
    temperature: float
    summary: str


def strip_titles(schema: Any) -> Any:
    """Drop ``title`` keywords (not properties named ``title``), as the registry does."""
    if isinstance(schema, list):
        return [strip_titles(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    stripped = {}
    for key, value in schema.items():
        if key == "title" and isinstance(value, str):
            continue
        if key in ("properties", "$defs"):
            stripped[key] = {name: strip_titles(sub) for name, sub in value.items()}
        else:
            stripped[key] = strip_titles(value)
    return stripped


def schema_of(model: type[BaseModel]) -> dict[str, Any]:
    schema: dict[str, Any] = strip_titles(model.model_json_schema())
    schema.setdefault("properties", {})
    return schema


@dataclass
class Source:
    name: str
    description: str
    input_schema: dict[str, Any]
    output_schema: dict[str, Any] | type[BaseModel] | None = None


def source(model: type[BaseModel] = SearchArgs, **fields: Any) -> Source:
    return Source(
        name=fields.pop("name", "search"),
        description=fields.pop("description", "Search the catalogue."),
        input_schema=schema_of(model),
        **fields,
    )


def nodes(schema: Any) -> Iterator[dict[str, Any]]:
    """Every schema node: the root, properties, items, union members, definitions."""
    if not isinstance(schema, dict):
        return
    yield schema
    for key in ("properties", "$defs"):
        for sub in (schema.get(key) or {}).values():
            yield from nodes(sub)
    yield from nodes(schema.get("items"))
    for key in ("anyOf", "allOf", "oneOf", "prefixItems"):
        for sub in schema.get(key) or ():
            yield from nodes(sub)


def keys_anywhere(schema: Any) -> set[str]:
    return {key for node in nodes(schema) for key in node}


def test_strip_titles_keeps_a_property_named_title() -> None:
    schema = schema_of(SearchArgs)
    assert "title" in schema["properties"]
    assert all(not isinstance(n.get("title"), str) for n in nodes(schema))


# -- OpenAI Chat Completions ---------------------------------------------------------------


def test_openai_definition() -> None:
    tool = source()
    definition = tool_schema(tool, "openai")
    TypeAdapter(ChatCompletionFunctionToolParam).validate_python(definition)
    assert definition == {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the catalogue.",
            "parameters": tool.input_schema,
        },
    }


def test_openai_strict_schema() -> None:
    tool = source()
    original = copy.deepcopy(tool.input_schema)
    definition = tool_schema(tool, ProviderFormat.OPENAI, strict=True)
    TypeAdapter(ChatCompletionFunctionToolParam).validate_python(definition)
    function = definition["function"]
    assert function["strict"] is True
    parameters = function["parameters"]
    assert tool.input_schema == original, "the tool's own schema must not change"
    jsonschema.Draft202012Validator.check_schema(parameters)

    for node in nodes(parameters):
        if node.get("type") == "object":
            assert node["additionalProperties"] is False
            assert node["required"] == list(node["properties"])
        assert "default" not in node
        assert "oneOf" not in node
        if "$ref" in node:
            assert set(node) == {"$ref"}, "OpenAI rejects $ref with sibling keywords"

    properties = parameters["properties"]
    assert properties["query"] == {
        "type": "string",
        "description": "What to look for",
        "minLength": 1,
        "maxLength": 200,
    }
    assert properties["limit"] == {
        "anyOf": [{"type": "integer", "minimum": 1, "maximum": 100}, {"type": "null"}]
    }
    assert properties["mode"] == {
        "anyOf": [{"type": "string", "enum": ["fast", "thorough"]}, {"type": "null"}]
    }
    assert properties["color"] == {"anyOf": [{"$ref": "#/$defs/Color"}, {"type": "null"}]}
    assert properties["priority"] == {"anyOf": [{"$ref": "#/$defs/Priority"}, {"type": "null"}]}
    assert properties["amount"] == {
        "anyOf": [{"type": "integer"}, {"type": "string"}, {"type": "null"}]
    }
    # A $ref with a description is inlined, and the inlined object made strict too.
    address = properties["address"]
    assert address["description"] == "Where to search"
    assert address["required"] == ["street", "zip_code"]
    assert parameters["$defs"]["Address"]["required"] == ["street", "zip_code"]

    # Strict means every key is sent, null standing for "left out".
    validator = jsonschema.Draft202012Validator(parameters)
    sent: dict[str, Any] = {name: None for name in properties}
    sent |= {"query": "q", "address": {"street": "x", "zip_code": None}}
    assert list(validator.iter_errors(sent)) == []
    assert list(validator.iter_errors({"query": "q"})) != []


def test_openai_strict_refuses_free_form_objects() -> None:
    with pytest.raises(
        RegistryError, match=r"tool 'counts'.*free-form object at #/properties/counts"
    ):
        tool_schema(source(WithMap, name="counts"), "openai", strict=True)
    assert tool_schema(source(WithMap), "openai")["function"]["parameters"]["properties"]


def test_openai_strict_keeps_recursive_refs() -> None:
    definition = tool_schema(source(TreeArgs), "openai", strict=True)
    parameters = definition["function"]["parameters"]
    tree = parameters["$defs"]["Tree"]
    assert tree["properties"]["children"] == {
        "anyOf": [{"type": "array", "items": {"$ref": "#/$defs/Tree"}}, {"type": "null"}]
    }
    jsonschema.Draft202012Validator.check_schema(parameters)


# -- OpenAI Responses ----------------------------------------------------------------------


@pytest.mark.parametrize("strict", [False, True])
def test_openai_responses_definition(strict: bool) -> None:
    tool = source()
    definition = tool_schema(tool, "openai-responses", strict=strict)
    TypeAdapter(FunctionToolParam).validate_python(definition)
    assert set(definition) == {"type", "name", "description", "parameters", "strict"}
    assert definition["strict"] is strict
    expected = tool_schema(tool, "openai", strict=strict)["function"]["parameters"]
    assert definition["parameters"] == expected


# -- Anthropic -----------------------------------------------------------------------------


def test_anthropic_definition() -> None:
    tool = source()
    definition = tool_schema(tool, "anthropic", strict=True)
    TypeAdapter(ToolParam).validate_python(definition)
    assert definition == {
        "name": "search",
        "description": "Search the catalogue.",
        "input_schema": tool.input_schema,
    }
    empty = tool_schema(source(Empty), "anthropic")
    TypeAdapter(ToolParam).validate_python(empty)
    assert empty["input_schema"] == {"type": "object", "properties": {}}


# -- Gemini --------------------------------------------------------------------------------


def test_gemini_declaration_is_sanitised() -> None:
    definition = tool_schema(source(), "gemini")
    declaration = genai.FunctionDeclaration.model_validate(definition)
    parameters = definition["parameters"]
    # Every key is a Schema field: a validate/dump round trip gives the same dict.
    assert (
        genai.Schema.model_validate(parameters).model_dump(
            mode="json", by_alias=True, exclude_none=True
        )
        == parameters
    )
    assert declaration.parameters is not None
    assert declaration.parameters.type == genai.Type.OBJECT
    forbidden = {"$ref", "$defs", "additionalProperties", "const", "title", "oneOf", "writeOnly"}
    assert not keys_anywhere(parameters) & forbidden
    assert all(node.get("type") != "NULL" for node in nodes(parameters))

    properties = parameters["properties"]
    assert parameters["required"] == ["query", "address"]
    assert properties["query"] == {
        "type": "STRING",
        "description": "What to look for",
        "minLength": 1,
        "maxLength": 200,
    }
    assert properties["limit"] == {"type": "INTEGER", "minimum": 1, "maximum": 100, "default": 10}
    assert properties["ratio"] == {"type": "NUMBER", "default": 0.5}
    assert properties["mode"] == {"type": "STRING", "enum": ["fast", "thorough"], "default": "fast"}
    assert properties["kind"] == {"type": "STRING", "enum": ["search"], "default": "search"}
    assert properties["color"] == {"type": "STRING", "enum": ["red", "blue"], "nullable": True}
    assert properties["priority"] == {
        "type": "INTEGER",
        "description": "One of: 1, 2",
        "default": 1,
    }
    assert properties["address"] == {
        "type": "OBJECT",
        "description": "Where to search",
        "properties": {
            "street": {"type": "STRING", "description": "Street and number"},
            "zip_code": {"type": "STRING", "nullable": True},
        },
        "required": ["street"],
    }
    address_without_description = dict(properties["address"])
    del address_without_description["description"]
    assert properties["stops"] == {
        "type": "ARRAY",
        "items": address_without_description,
        "default": [],
    }
    assert properties["tags"] == {"type": "ARRAY", "items": {"type": "STRING"}, "default": []}
    assert properties["title"] == {
        "type": "STRING",
        "nullable": True,
        "description": "A property named like a keyword",
    }
    assert properties["contact"]["description"] == "Format: email"
    assert "format" not in properties["contact"]
    assert properties["pair"]["items"] == {"anyOf": [{"type": "INTEGER"}, {"type": "STRING"}]}
    assert properties["pair"]["nullable"] is True
    assert properties["amount"]["anyOf"] == [{"type": "INTEGER"}, {"type": "STRING"}]


def test_gemini_tool_without_parameters() -> None:
    definition = tool_schema(source(Empty, name="ping"), "gemini")
    genai.FunctionDeclaration.model_validate(definition)
    # The API refuses an OBJECT with empty properties.
    assert definition["parameters"] == {"type": "OBJECT"}


def test_gemini_recursive_schema_is_refused() -> None:
    with pytest.raises(RegistryError, match=r"tool 'tree' in gemini format: recursive schema"):
        tool_schema(source(TreeArgs, name="tree"), "gemini")


def test_gemini_free_form_map_loses_its_value_schema_only() -> None:
    definition = tool_schema(source(WithMap), "gemini")
    genai.FunctionDeclaration.model_validate(definition)
    assert definition["parameters"]["properties"]["counts"] == {"type": "OBJECT"}


# -- MCP -----------------------------------------------------------------------------------


def test_mcp_definition() -> None:
    tool = source(output_schema=schema_of(Forecast))
    definition = tool_schema(tool, "mcp")
    validated = mcp_types.Tool.model_validate(definition)
    assert validated.input_schema == tool.input_schema
    assert definition == {
        "name": "search",
        "description": "Search the catalogue.",
        "inputSchema": tool.input_schema,
        "outputSchema": schema_of(Forecast),
    }


def test_mcp_output_schema_of_a_model_and_of_a_non_object() -> None:
    from_model = tool_schema(source(output_schema=Forecast), "mcp")
    mcp_types.Tool.model_validate(from_model)
    assert from_model["outputSchema"]["required"] == ["temperature", "summary"]

    listed = {"type": "array", "items": {"type": "integer"}}
    wrapped = tool_schema(source(output_schema=listed), "mcp")
    mcp_types.Tool.model_validate(wrapped)
    assert wrapped["outputSchema"] == {
        "type": "object",
        "properties": {"result": listed},
        "required": ["result"],
    }
    assert "outputSchema" not in tool_schema(source(), "mcp")


# -- all formats ---------------------------------------------------------------------------


def test_tool_schemas_keep_order_and_never_touch_the_input() -> None:
    tools = [source(name="a"), source(Empty, name="b")]
    before = copy.deepcopy([t.input_schema for t in tools])
    for format in ProviderFormat:
        for strict in (False, True):
            definitions = tool_schemas(tools, format, strict=strict)
            assert len(definitions) == 2
    assert [t.input_schema for t in tools] == before
    names = [d["function"]["name"] for d in tool_schemas(tools, "openai")]
    assert names == ["a", "b"]


def test_unknown_format() -> None:
    with pytest.raises(ValueError, match="unknown format 'cohere'"):
        tool_schema(source(), "cohere")
