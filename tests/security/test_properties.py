"""Property tests: arbitrary JSON never crashes parsing, and nothing unvalidated runs."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.apps import registry
from toolq import ToolCall, parse_tool_calls
from toolq.errors import InvalidArgumentsError, PayloadError

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=25,
)

call_like = st.fixed_dictionaries(
    {"id": st.text(max_size=8), "name": st.sampled_from(["echo", "add", "wipe", "nope", ""])},
    optional={"arguments": json_values | st.text(max_size=30)},
)

openai_like = st.builds(
    lambda calls: {
        "role": "assistant",
        "tool_calls": [
            {
                "id": c["id"],
                "type": "function",
                "function": {
                    "name": c["name"],
                    "arguments": c.get("arguments", "{}")
                    if isinstance(c.get("arguments", "{}"), str)
                    else str(c.get("arguments")),
                },
            }
            for c in calls
        ],
    },
    st.lists(call_like, max_size=4),
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(json_values, st.lists(call_like, max_size=5), openai_like))
def test_parse_never_raises_anything_but_payload_error(payload: Any) -> None:
    try:
        calls = parse_tool_calls(payload)
    except PayloadError:
        return
    for call in calls:
        assert isinstance(call, ToolCall)
        assert isinstance(call.arguments, dict)
        if call.error and "JSON" in call.error:
            assert call.arguments == {}  # undecodable arguments are never half-kept


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["echo", "add", "wipe", "transfer", "login"]), json_values)
def test_validation_accepts_only_what_matches_the_schema(name: str, arguments: Any) -> None:
    tool = registry.require(name)
    if not isinstance(arguments, dict):
        return
    try:
        validated = tool.validate(arguments)
    except InvalidArgumentsError as exc:
        assert exc.message.startswith(f"invalid arguments for {name!r}")
        return
    # Whatever validated has exactly the tool's parameters, with the declared types.
    properties = tool.input_schema["properties"]
    assert set(validated) == set(properties)
    for key in tool.input_schema.get("required", []):
        assert key in arguments
    assert not set(arguments) - set(properties)


@settings(max_examples=200)
@given(json_values)
def test_registry_invoke_never_crashes_on_arbitrary_arguments(arguments: Any) -> None:
    if not isinstance(arguments, dict):
        arguments = {"value": arguments}
    result = registry.invoke("add", arguments)
    assert result.status.value in {"succeeded", "failed"}
    if result.status.value == "succeeded":
        assert isinstance(result.output, int)
