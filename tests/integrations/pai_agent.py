"""A pydantic-ai agent on a scripted ``FunctionModel``, and the first half of a run as a process.

The model calls ``echo`` and two ``wipe``s at once; once every call has an answer it replies
with what it read, as JSON ``{tool_call_id: [outcome, content]}``, so the tests see exactly
what reached the model.

``python -m tests.integrations.pai_agent OUT`` runs the agent until it pauses for approval and
writes the message history and the deferred requests to ``OUT``, then exits.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from pydantic_ai import Agent, DeferredToolRequests
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from toolq import Client, Settings
from toolq.integrations.pydantic_ai import ToolqToolset

FIRST_TURN = [
    ToolCallPart("echo", {"text": "hi"}, tool_call_id="pai-echo"),
    ToolCallPart("wipe", {"target": "prod"}, tool_call_id="pai-wipe-1"),
    ToolCallPart("wipe", {"target": "dev"}, tool_call_id="pai-wipe-2"),
]


def answers(messages: list[ModelMessage]) -> dict[str, ToolReturnPart]:
    return {
        part.tool_call_id: part
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart)
    }


def scripted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    seen = answers(messages)
    if not seen:
        return ModelResponse(parts=list(FIRST_TURN))
    read = {cid: [p.outcome, p.model_response_str()] for cid, p in seen.items()}
    return ModelResponse(parts=[TextPart(json.dumps(read, sort_keys=True))])


def make_agent(toolset: ToolqToolset, model: Any = None) -> Agent[None, Any]:
    return Agent(
        model or FunctionModel(scripted),
        output_type=[str, DeferredToolRequests],  # type: ignore[arg-type]
        toolsets=[toolset],
    )


def first_half(out: str) -> None:
    from tests.apps import registry

    with Client(registry, Settings()) as client:
        toolset = ToolqToolset(client, tools=["echo", "wipe"])
        result = make_agent(toolset).run_sync("wipe prod and dev")
        requests = result.output
        assert isinstance(requests, DeferredToolRequests), requests
        state = {
            "messages": json.loads(ModelMessagesTypeAdapter.dump_json(result.all_messages())),
            "approvals": [p.tool_call_id for p in requests.approvals],
            "metadata": requests.metadata,
        }
    with open(out, "w") as f:
        json.dump(state, f)


if __name__ == "__main__":
    first_half(sys.argv[1])
