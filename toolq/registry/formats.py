"""Tool definitions in each provider's format, from one JSON schema per tool.

========================  =====================================================================
format                    definition
========================  =====================================================================
``openai``                ``{"type": "function", "function": {name, description, parameters}}``
``openai-responses``      ``{"type": "function", name, description, parameters, strict}``
``anthropic``             ``{name, description, input_schema}``
``gemini``                FunctionDeclaration ``{name, description, parameters}``
``mcp``                   Tool ``{name, description, inputSchema, outputSchema?}``
========================  =====================================================================

``strict=True`` applies to the two OpenAI formats only (see ``dialects.openai_strict``);
the others ignore it. Gemini parameters are rewritten by ``dialects.gemini_schema``.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any, Protocol

from pydantic import BaseModel

from toolq.errors import RegistryError
from toolq.models import ProviderFormat
from toolq.registry.dialects import gemini_schema, openai_strict
from toolq.registry.schema import model_json_schema


class SchemaSource(Protocol):
    """What a definition is made from; ``Tool`` is one."""

    @property
    def name(self) -> str:
        """The tool's name, as the model calls it."""
        ...

    @property
    def description(self) -> str:
        """What the tool does, for the model."""
        ...

    @property
    def input_schema(self) -> dict[str, Any]:
        """JSON schema of the arguments (titles stripped)."""
        ...

    @property
    def output_schema(self) -> dict[str, Any] | type[BaseModel] | None:
        """JSON schema (or pydantic model) of the output, if declared."""
        ...


def tool_schema(
    tool: SchemaSource, format: ProviderFormat | str, *, strict: bool = False
) -> dict[str, Any]:
    """Return ``tool``'s definition in ``format``; RegistryError if it cannot be expressed."""
    fmt = ProviderFormat.parse(format)
    parameters = _object_schema(tool.input_schema)
    try:
        match fmt:
            case ProviderFormat.OPENAI:
                function: dict[str, Any] = {"name": tool.name, "description": tool.description}
                function["parameters"] = openai_strict(parameters) if strict else parameters
                if strict:
                    function["strict"] = True
                return {"type": "function", "function": function}
            case ProviderFormat.OPENAI_RESPONSES:
                return {
                    "type": "function",
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": openai_strict(parameters) if strict else parameters,
                    "strict": strict,
                }
            case ProviderFormat.ANTHROPIC:
                return {
                    "name": tool.name,
                    "description": tool.description,
                    "input_schema": parameters,
                }
            case ProviderFormat.GEMINI:
                return {
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": gemini_schema(parameters),
                }
            case ProviderFormat.MCP:
                definition = {
                    "name": tool.name,
                    "description": tool.description,
                    "inputSchema": parameters,
                }
                output = _output_schema(tool.output_schema)
                if output is not None:
                    definition["outputSchema"] = output
                return definition
    except RegistryError as exc:
        raise RegistryError(
            f"tool {tool.name!r} in {fmt.value} format: {exc.message}",
            tool=tool.name,
            format=fmt.value,
            **exc.details,
        ) from None


def tool_schemas(
    tools: Iterable[SchemaSource], format: ProviderFormat | str, *, strict: bool = False
) -> list[dict[str, Any]]:
    """Return the definitions of ``tools`` in ``format``, in order."""
    return [tool_schema(tool, format, strict=strict) for tool in tools]


def _object_schema(schema: dict[str, Any]) -> dict[str, Any]:
    # Every provider wants an object at the root, even for a tool without parameters.
    copied = copy.deepcopy(schema)
    copied.setdefault("type", "object")
    if copied["type"] == "object":
        copied.setdefault("properties", {})
    return copied


def _output_schema(declared: dict[str, Any] | type[BaseModel] | None) -> dict[str, Any] | None:
    # MCP output schemas must be objects: other outputs are sent as {"result": output}
    # (see toolq.dispatch.providers.mcp), so their schema is wrapped the same way.
    if declared is None:
        return None
    schema = model_json_schema(declared) if isinstance(declared, type) else copy.deepcopy(declared)
    if schema.get("type") == "object":
        return schema
    defs = schema.pop("$defs", None)
    wrapped = {"type": "object", "properties": {"result": schema}, "required": ["result"]}
    if defs is not None:
        wrapped["$defs"] = defs
    return wrapped
