"""Argument schemas: derived from signatures, given as models, or as raw JSON-schema dicts."""

from __future__ import annotations

import enum
from typing import Annotated, Any, Literal

import pytest
from pydantic import BaseModel, Field, SecretStr

from toolq import Tool, ToolContext, ToolRegistry
from toolq.errors import ConfigurationError, InvalidArgumentsError, InvalidOutputError
from toolq.registry.schema import DictSchema, OutputSchema, parse_docstring


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Point(BaseModel):
    x: int
    y: int = 0


class Shape(BaseModel):
    corners: list[Point]
    color: Color = Color.RED


class Sum(BaseModel):
    total: int


@pytest.fixture
def registry() -> ToolRegistry:
    return ToolRegistry()


# -- schemas derived from signatures -----------------------------------------------------------


def test_types_defaults_and_required(registry: ToolRegistry) -> None:
    @registry.tool
    def search(query: str, limit: int = 10, exact: bool = False, ratio: float | None = None) -> Any:
        return None

    schema = search.input_schema
    assert schema["type"] == "object"
    assert schema["required"] == ["query"]
    assert schema["additionalProperties"] is False
    props = schema["properties"]
    assert props["query"] == {"type": "string"}
    assert props["limit"] == {"type": "integer", "default": 10}
    assert props["exact"] == {"type": "boolean", "default": False}
    assert props["ratio"] == {"anyOf": [{"type": "number"}, {"type": "null"}], "default": None}
    assert "title" not in schema and all("title" not in p for p in props.values())


def test_field_constraints_are_in_the_schema_and_enforced(registry: ToolRegistry) -> None:
    @registry.tool
    def page(
        count: Annotated[int, Field(ge=1, le=5)],
        label: str = Field("a", max_length=3, pattern=r"^[a-z]+$"),
    ) -> dict[str, Any]:
        return {"count": count, "label": label}

    props = page.input_schema["properties"]
    assert props["count"] == {"type": "integer", "minimum": 1, "maximum": 5}
    assert props["label"] == {
        "type": "string",
        "default": "a",
        "maxLength": 3,
        "pattern": "^[a-z]+$",
    }
    assert page.validate({"count": 5}) == {"count": 5, "label": "a"}
    with pytest.raises(InvalidArgumentsError) as err:
        page.validate({"count": 0, "label": "TOOLONG"})
    fields = [e.split(":")[0] for e in err.value.details["errors"]]
    assert fields == ["count", "label"]


def test_nested_models_reach_the_handler_as_instances(registry: ToolRegistry) -> None:
    @registry.tool
    def area(shape: Shape) -> int:
        xs = [p.x for p in shape.corners]
        return max(xs) - min(xs)

    schema = area.input_schema
    assert schema["properties"]["shape"] == {"$ref": "#/$defs/Shape"}
    assert schema["$defs"]["Point"]["required"] == ["x"]
    assert schema["$defs"]["Shape"]["properties"]["color"]["default"] == "red"
    assert "title" not in schema["$defs"]["Shape"]

    validated = area.validate({"shape": {"corners": [{"x": 1}, {"x": 7, "y": 2}]}})
    assert isinstance(validated["shape"], Shape)
    assert validated["shape"].corners[1] == Point(x=7, y=2)
    assert registry.invoke("area", {"shape": {"corners": [{"x": 1}, {"x": 7}]}}).output == 6

    with pytest.raises(InvalidArgumentsError, match=r"shape\.corners\.1\.x"):
        area.validate({"shape": {"corners": [{"x": 1}, {"x": "seven"}]}})


def test_literal_and_enum_parameters(registry: ToolRegistry) -> None:
    @registry.tool
    def paint(color: Color, finish: Literal["matte", "gloss"] = "matte") -> str:
        return f"{color.value}/{finish}"

    schema = paint.input_schema
    assert schema["$defs"]["Color"] == {"enum": ["red", "blue"], "type": "string"}
    assert schema["properties"]["finish"] == {
        "enum": ["matte", "gloss"],
        "type": "string",
        "default": "matte",
    }
    assert paint.validate({"color": "blue"})["color"] is Color.BLUE
    assert registry.invoke("paint", {"color": "blue", "finish": "gloss"}).output == "blue/gloss"
    refused = registry.invoke("paint", {"color": "green", "finish": "satin"})
    assert refused.error_type == "invalid_arguments"
    assert "color: Input should be 'red' or 'blue'" in (refused.error or "")
    assert "finish: Input should be 'matte' or 'gloss'" in (refused.error or "")


def test_google_docstring_gives_description_and_parameter_descriptions(
    registry: ToolRegistry,
) -> None:
    @registry.tool
    def copy(src: str, dst: str, overwrite: bool = False) -> None:
        """Copy a file.

        Copies bytes only.

        Args:
            src (str): Path to read.
            dst: Path to write,
                created if missing.
            overwrite: Replace an existing file.

        Returns:
            Nothing at all.

        Raises:
            OSError: when the disk is full.
        """

    assert copy.description == "Copy a file.\n\nCopies bytes only."
    props = copy.input_schema["properties"]
    assert props["src"]["description"] == "Path to read."
    assert props["dst"]["description"] == "Path to write, created if missing."
    assert props["overwrite"]["description"] == "Replace an existing file."


def test_explicit_descriptions_beat_the_docstring(registry: ToolRegistry) -> None:
    @registry.tool(description="Explicit summary.")
    def f(
        a: Annotated[int, Field(description="from Annotated")],
        b: int = Field(1, description="from Field"),
        c: int = 2,
    ) -> None:
        """Docstring summary.

        Args:
            a: from docstring a.
            b: from docstring b.
            c: from docstring c.
        """

    props = f.input_schema["properties"]
    assert f.description == "Explicit summary."
    assert props["a"]["description"] == "from Annotated"
    assert props["b"]["description"] == "from Field"
    assert props["c"]["description"] == "from docstring c."


@pytest.mark.parametrize(
    ("doc", "summary", "params"),
    [
        (None, "", {}),
        ("One line.", "One line.", {}),
        ("Do it.\n\nReturns:\n    the thing.\n", "Do it.", {}),
        (
            "Do it.\n\nRaises:\n    ValueError: bad.\n\nArgs:\n    a: first.\n",
            "Do it.",
            {"a": "first."},
        ),
        (
            "Do it.\n\nParameters:\n    *args: extra.\n    **kw (dict): options.\n"
            "    b: see: here.\n",
            "Do it.",
            {"args": "extra.", "kw": "options.", "b": "see: here."},
        ),
        ("Do it.\n\nNote:\n    careful: really.\n", "Do it.", {}),
    ],
)
def test_parse_docstring(doc: str | None, summary: str, params: dict[str, str]) -> None:
    assert parse_docstring(doc) == (summary, params)


def test_tool_context_is_injected_and_hidden(registry: ToolRegistry) -> None:
    @registry.tool
    def who(name: str, ctx: ToolContext) -> str:
        return f"{name}@{ctx.call_id}/{ctx.tool_name}"

    @registry.tool
    def maybe(name: str, context: ToolContext | None = None) -> str:
        return f"{name}@{context.call_id if context else None}"

    for tool in (who, maybe):
        assert list(tool.input_schema["properties"]) == ["name"]
        assert tool.input_schema["required"] == ["name"]
    assert registry.invoke("who", {"name": "ann"}, call_id="c1").output == "ann@c1/who"
    assert registry.invoke("maybe", {"name": "bob"}, call_id="c2").output == "bob@c2"
    refused = registry.invoke("who", {"name": "ann", "ctx": {}})
    assert refused.error_type == "invalid_arguments"
    assert "ctx: Extra inputs are not permitted" in (refused.error or "")


def test_secret_parameters(registry: ToolRegistry) -> None:
    seen: list[object] = []

    @registry.tool
    def login(user: str, password: SecretStr, otp: SecretStr | None = None) -> str:
        seen.append(password)
        return f"{user}:{len(password.get_secret_value())}"

    assert login.secret_fields == frozenset({"password", "otp"})
    assert login.input_schema["properties"]["password"] == {
        "type": "string",
        "format": "password",
        "writeOnly": True,
    }
    args = {"user": "ann", "password": "hunter2", "otp": "123"}
    assert login.redact(args) == {"user": "ann", "password": "**********", "otp": "**********"}
    assert args["password"] == "hunter2"  # redact copies
    result = registry.invoke("login", args)
    assert result.output == "ann:7"
    assert isinstance(seen[0], SecretStr) and "hunter2" not in repr(seen[0])


def test_unknown_arguments_are_refused_by_name(registry: ToolRegistry) -> None:
    @registry.tool
    def ping(host: str) -> str:
        return host

    with pytest.raises(InvalidArgumentsError) as err:
        ping.validate({"host": "a", "port": 80})
    assert err.value.details == {"tool": "ping", "errors": ["port: Extra inputs are not permitted"]}
    with pytest.raises(InvalidArgumentsError, match="host: Field required"):
        ping.validate({})


def test_unresolvable_type_hints_are_a_configuration_error(registry: ToolRegistry) -> None:
    def broken(a: Missing) -> None:  # type: ignore[name-defined] # noqa: F821
        return None

    with pytest.raises(ConfigurationError, match="cannot resolve type hints"):
        registry.register(broken)
    assert "broken" not in registry


def test_class_tool_with_input_model_and_typed_execute() -> None:
    class WithInput(Tool):
        name = "with_input"
        description = "d"

        class Input(BaseModel):
            path: str = Field(description="where")
            depth: int = Field(1, ge=0)

        def execute(self, path: str, depth: int) -> str:
            return f"{path}:{depth}"

    class Typed(Tool):
        """Typed summary."""

        name = "typed"

        def execute(self, word: str, times: int = 2, ctx: ToolContext | None = None) -> str:
            """Repeat a word.

            Args:
                word: The word.
                times: How often.
            """
            return word * times

    with_input, typed = WithInput(), Typed()
    path = with_input.input_schema["properties"]["path"]
    assert path == {"type": "string", "description": "where"}
    assert with_input.validate({"path": "/"}) == {"path": "/", "depth": 1}
    with pytest.raises(InvalidArgumentsError, match="depth"):
        with_input.validate({"path": "/", "depth": -1})
    assert typed.description == "Typed summary."
    assert typed.input_schema["properties"] == {
        "word": {"type": "string", "description": "The word."},
        "times": {"type": "integer", "default": 2, "description": "How often."},
    }


# -- raw JSON-schema dicts ----------------------------------------------------------------------

RAW = {
    "type": "object",
    "properties": {
        "format": {"type": "string", "enum": ["iso", "unix"], "default": "iso"},
        "count": {"type": "integer", "minimum": 0},
        "token": {"type": "string", "x-secret": True},
        "key": {"type": "string", "writeOnly": True},
        "pin": {"type": "string", "format": "password"},
    },
    "required": ["count"],
}


def test_dict_schema_fills_defaults_and_names_bad_fields() -> None:
    schema = DictSchema("raw", RAW)
    assert schema.validate({"count": 1}) == {"count": 1, "format": "iso"}
    assert schema.validate({"count": 1, "format": "unix"}) == {"count": 1, "format": "unix"}
    with pytest.raises(InvalidArgumentsError) as err:
        schema.validate({"format": "human", "count": -1})
    assert err.value.details["errors"] == [
        "count: -1 is less than the minimum of 0",
        "format: 'human' is not one of ['iso', 'unix']",
    ]
    with pytest.raises(InvalidArgumentsError, match="'count' is a required property"):
        schema.validate({})
    assert schema.secret_fields == frozenset({"token", "key", "pin"})


def test_dict_schema_refuses_an_invalid_schema() -> None:
    with pytest.raises(ConfigurationError, match="tool 'bad' has an invalid schema"):
        DictSchema("bad", {"type": "object", "properties": {"a": {"type": "nonsense"}}})


def test_dict_schema_does_not_change_the_given_dict() -> None:
    raw = {"properties": {"a": {"type": "string", "default": "x"}}}
    schema = DictSchema("t", raw)
    assert schema.json_schema["type"] == "object"
    assert raw == {"properties": {"a": {"type": "string", "default": "x"}}}


# -- output schemas -----------------------------------------------------------------------------


def test_output_schema_from_a_dict() -> None:
    out = OutputSchema("t", {"type": "object", "properties": {"n": {"type": "integer"}}})
    assert out.validate({"n": 1}) == {"n": 1}
    with pytest.raises(InvalidOutputError, match=r"n: 'one' is not of type 'integer'"):
        out.validate({"n": "one"})
    with pytest.raises(ConfigurationError, match="invalid output schema"):
        OutputSchema("t", {"type": 7})


def test_output_schema_from_a_model() -> None:
    out = OutputSchema("t", Sum)
    assert out.json_schema == {
        "type": "object",
        "properties": {"total": {"type": "integer"}},
        "required": ["total"],
    }
    assert out.validate(Sum(total=3)) == {"total": 3}
    with pytest.raises(InvalidOutputError, match="'total' is a required property"):
        out.validate({"sum": 3})


def test_strict_mode_nulls_fall_back_to_defaults():
    from toolq import ToolRegistry

    registry = ToolRegistry()

    @registry.tool
    def search(query: str, limit: int = 5, lang: str | None = None) -> dict:
        """Search."""
        return {"query": query, "limit": limit, "lang": lang}

    result = registry.invoke("search", {"query": "q", "limit": None, "lang": None})
    assert result.output == {"query": "q", "limit": 5, "lang": None}
    refused = registry.invoke("search", {"query": None, "limit": 1})
    assert refused.error_type == "invalid_arguments"
