"""Argument schemas: one object gives a tool's JSON schema and validates its arguments.

Two sources: a pydantic model (derived from a function signature, or a class tool's
``Input``) and a raw JSON-schema dict (validated with ``jsonschema``).
"""

from __future__ import annotations

import inspect
import json
import re
import typing
from collections.abc import Callable
from typing import Any, Protocol

import jsonschema
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    create_model,
)
from pydantic.fields import FieldInfo
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue

from toolq.errors import ConfigurationError, InvalidArgumentsError, InvalidOutputError
from toolq.execution.context import ToolContext
from toolq.registry.secrets import SecretPaths, get_path


class ArgumentSchema(Protocol):
    """What the executor needs from a schema."""

    json_schema: dict[str, Any]
    secret_paths: SecretPaths
    secret_fields: frozenset[str]

    def validate(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """Return validated keyword arguments for the handler; raise ``InvalidArgumentsError``."""
        ...

    def given(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """The arguments the model gave, as ``validate`` reads them (before any coercion)."""
        ...


class _NoTitles(GenerateJsonSchema):
    """Pydantic's generator without the ``title`` keys providers don't need."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False

    def generate(self, schema: Any, mode: Any = "validation") -> JsonSchemaValue:
        result = super().generate(schema, mode=mode)
        result.pop("title", None)
        for definition in result.get("$defs", {}).values():
            definition.pop("title", None)
        return result

    def model_schema(self, schema: Any) -> JsonSchemaValue:
        result = super().model_schema(schema)
        result.pop("title", None)
        return result

    def enum_schema(self, schema: Any) -> JsonSchemaValue:
        result = super().enum_schema(schema)
        result.pop("title", None)
        return result


def model_json_schema(model: type[BaseModel]) -> dict[str, Any]:
    """Return a model's JSON schema without titles."""
    schema = model.model_json_schema(schema_generator=_NoTitles)
    schema.setdefault("properties", {})
    schema.setdefault("type", "object")
    return schema


def _texts(value: Any) -> list[str]:
    """How a value may appear in a message: as given and as its repr."""
    if isinstance(value, str):
        return [value, repr(value)] if value else []
    return [repr(value), json.dumps(value, default=str)]


def _describe(error: dict[str, Any]) -> str:
    location = ".".join(str(part) for part in error["loc"]) or "arguments"
    return f"{location}: {error['msg']}"


def invalid_arguments(tool_name: str, errors: list[str]) -> InvalidArgumentsError:
    """Build the one error raised for arguments that do not validate, naming every field."""
    listed = "; ".join(errors)
    return InvalidArgumentsError(
        f"invalid arguments for {tool_name!r}: {listed}", tool=tool_name, errors=errors
    )


class ModelSchema:
    """Arguments validated by a pydantic model (derived from a signature or given)."""

    def __init__(self, tool_name: str, model: type[BaseModel]) -> None:
        self.tool_name = tool_name
        self.model = model
        self.json_schema = model_json_schema(model)
        # ``SecretStr`` / ``SecretBytes`` appear in the schema as ``format: password``.
        self.secret_paths = SecretPaths(self.json_schema)
        self.secret_fields = self.secret_paths.top_level
        # Read once: ``model_fields`` is a descriptor that costs a worker a few µs per call.
        fields = model.model_fields
        self._names = tuple(fields)
        self._null_means_default = frozenset(
            name for name, f in fields.items() if not f.is_required() and f.default is not None
        )

    def validate(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """Return validated keyword arguments; nested models stay model instances.

        A ``null`` for an optional argument whose default is not ``None`` means "not given"
        (OpenAI strict mode sends every property), so the default applies.
        """
        try:
            instance = self.model.model_validate(self.given(arguments))
        except ValidationError as exc:
            errors = [_describe(dict(e)) for e in exc.errors(include_url=False)]
            raise invalid_arguments(self.tool_name, errors) from None
        return {name: getattr(instance, name) for name in self._names}

    def given(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """``arguments`` without the ``null``s that mean "not given" (``validate``).

        A ``requires_approval`` predicate sees these, so a ``null`` cannot pass its check as
        something other than the default the handler then gets.
        """
        defaulted = self._null_means_default
        if not defaulted:
            return arguments
        return {
            name: value
            for name, value in arguments.items()
            if not (value is None and name in defaulted)
        }


def _check_schema(tool_name: str, schema: dict[str, Any], what: str) -> None:
    """Raise ``ConfigurationError`` unless ``schema`` is a valid JSON schema (2020-12)."""
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        message = f"tool {tool_name!r} has an invalid {what}: {exc.message}"
        raise ConfigurationError(message) from exc


class DictSchema:
    """Arguments validated against a raw JSON-schema dict (roura's ``parameters``)."""

    def __init__(self, tool_name: str, schema: dict[str, Any]) -> None:
        _check_schema(tool_name, schema, "schema")
        self.tool_name = tool_name
        self.json_schema = {"type": "object", "properties": {}, **schema}
        self._validator = jsonschema.Draft202012Validator(self.json_schema)
        self.secret_paths = SecretPaths(self.json_schema)
        self.secret_fields = self.secret_paths.top_level

    def validate(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """Return the arguments with top-level schema defaults filled in."""
        errors = sorted(self._validator.iter_errors(arguments), key=lambda e: list(e.path))
        if errors:
            # jsonschema quotes the failing value: withhold messages that would show a secret
            hidden = [
                text
                for path in self.secret_paths.locate(arguments, conservative=True)
                for text in _texts(get_path(arguments, path))
            ]
            described = []
            for error in errors:
                location = ".".join(str(part) for part in error.path) or "arguments"
                message = error.message
                if any(text in message for text in hidden):
                    message = f"fails the {error.validator!r} check (a secret value; not shown)"
                described.append(f"{location}: {message}")
            raise invalid_arguments(self.tool_name, described)
        filled = dict(arguments)
        for name, prop in self.json_schema.get("properties", {}).items():
            if name not in filled and isinstance(prop, dict) and "default" in prop:
                filled[name] = prop["default"]
        return filled

    def given(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """``arguments`` as they are: a ``null`` is a value the schema allows or refuses."""
        return arguments


class OutputSchema:
    """Validates a handler's output against a JSON schema or a pydantic model."""

    def __init__(self, tool_name: str, schema: dict[str, Any] | type[BaseModel]) -> None:
        self.tool_name = tool_name
        self.model: type[BaseModel] | None = None
        if isinstance(schema, type) and issubclass(schema, BaseModel):
            self.model = schema
            self.json_schema = model_json_schema(schema)
        else:
            _check_schema(tool_name, schema, "output schema")
            self.json_schema = dict(schema)
        self._validator = jsonschema.Draft202012Validator(self.json_schema)

    def validate(self, output: Any) -> Any:
        """Return the output (JSON-able) if it matches; raise ``InvalidOutputError``."""
        if isinstance(output, BaseModel):
            output = output.model_dump(mode="json")
        errors = list(self._validator.iter_errors(output))
        if errors:
            listed = "; ".join(
                f"{'.'.join(str(p) for p in e.path) or 'output'}: {e.message}" for e in errors
            )
            raise InvalidOutputError(
                f"output of {self.tool_name!r} does not match its schema: {listed}"
            )
        return output


# -- signatures ---------------------------------------------------------------------------

_SECTION = re.compile(r"^\s*(Args|Arguments|Parameters|Params):\s*$")
_OTHER_SECTION = re.compile(r"^\s*[A-Z][A-Za-z ]*:\s*$")
_PARAM = re.compile(r"^\s*(\*{0,2}\w+)\s*(\([^)]*\))?\s*:\s*(.*)$")


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """Return the summary and per-parameter descriptions of a Google-style docstring.

    The summary is the text before the first section; ``Returns:``, ``Raises:`` and other
    sections are left out of both.
    """
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    summary: list[str] = []
    params: dict[str, str] = {}
    current: str | None = None
    section: str | None = None  # None: the summary; then "args" or "other"
    param_indent = None
    for line in lines:
        if _SECTION.match(line):
            section, current = "args", None
            continue
        if _OTHER_SECTION.match(line) and not line[:1].isspace():
            section, current = "other", None
            continue
        if section is None:
            summary.append(line)
        if section != "args":
            continue
        indent = len(line) - len(line.lstrip())
        match = _PARAM.match(line)
        if match and (param_indent is None or indent <= param_indent):
            param_indent = indent
            current = match.group(1).lstrip("*")
            params[current] = match.group(3).strip()
        elif current and line.strip():
            params[current] = f"{params[current]} {line.strip()}".strip()
    description = "\n".join(summary).strip()
    return description, params


def _is_context(annotation: Any) -> bool:
    """Tell whether ``annotation`` is ``ToolContext`` (also optional or ``Annotated``)."""
    if isinstance(annotation, type):
        return issubclass(annotation, ToolContext)
    return any(_is_context(arg) for arg in typing.get_args(annotation))


def _has_description(annotation: Any) -> bool:
    """Tell whether an ``Annotated[..., Field(description=...)]`` describes itself."""
    if typing.get_origin(annotation) is not typing.Annotated:
        return False
    return any(
        isinstance(meta, FieldInfo) and meta.description is not None
        for meta in annotation.__metadata__
    )


def context_parameter(func: Callable[..., Any]) -> str | None:
    """Return the name of the parameter annotated ``ToolContext``, if any."""
    hints = _hints(func)
    for name in inspect.signature(func).parameters:
        if _is_context(hints.get(name)):
            return name
    return None


def _hints(func: Callable[..., Any]) -> dict[str, Any]:
    try:
        return typing.get_type_hints(func, include_extras=True)
    except Exception as exc:
        raise ConfigurationError(f"cannot resolve type hints of {func!r}: {exc}") from exc


def signature_model(
    func: Callable[..., Any], model_name: str, descriptions: dict[str, str]
) -> type[BaseModel]:
    """Build a pydantic model of ``func``'s parameters, without the ``ToolContext`` one.

    Unknown arguments are refused rather than dropped: a model that invents a parameter
    should hear about it.
    """
    hints = _hints(func)
    fields: dict[str, Any] = {}
    for name, param in inspect.signature(func).parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        annotation = hints.get(name, Any)
        if _is_context(annotation):
            continue
        # an explicit Field description beats the docstring's
        described = _has_description(annotation)
        default = param.default
        if isinstance(default, FieldInfo):
            field = default
            if field.description is None and name in descriptions and not described:
                field.description = descriptions[name]
        else:
            value = ... if default is inspect.Parameter.empty else default
            field = Field(value) if described else Field(value, description=descriptions.get(name))
        fields[name] = (annotation, field)
    return create_model(model_name, __config__=ConfigDict(extra="forbid"), **fields)
