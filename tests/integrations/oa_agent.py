"""An Agents SDK agent on a scripted ``Model``, and the first half of a run as a process.

The model calls ``echo`` and two ``wipe``s at once; once every call has an output it replies
with what it read, as JSON ``{call_id: output}``.

``python -m tests.integrations.oa_agent OUT RUN_ID`` runs the agent until it is interrupted for
approval, writes the serialized ``RunState`` to ``OUT`` and exits.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from agents import Agent, Runner, set_tracing_disabled
from agents.items import ModelResponse
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from toolq import Client, Settings
from toolq.integrations.openai_agents import ToolqAgentTools

set_tracing_disabled(True)  # offline: nothing is exported

FIRST_TURN = [
    ("oa-echo", "echo", {"text": "hi"}),
    ("oa-wipe-1", "wipe", {"target": "prod"}),
    ("oa-wipe-2", "wipe", {"target": "dev"}),
]


class ScriptedModel(Model):
    """Calls the first turn's tools, then answers with every output it read."""

    def __init__(self, first_turn: list[tuple[str, str, dict[str, Any]]] = FIRST_TURN) -> None:
        self.first_turn = first_turn

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        items = input if isinstance(input, list) else []
        read = {
            item["call_id"]: item["output"]
            for item in items
            if isinstance(item, dict) and item.get("type") == "function_call_output"
        }
        if not read:
            output: list[Any] = [
                ResponseFunctionToolCall(
                    type="function_call",
                    call_id=cid,
                    name=name,
                    arguments=json.dumps(args),
                    id=f"fc_{cid}",
                )
                for cid, name, args in self.first_turn
            ]
        else:
            text = ResponseOutputText(
                type="output_text", text=json.dumps(read, sort_keys=True), annotations=[]
            )
            output = [
                ResponseOutputMessage(
                    type="message", id="msg_1", role="assistant", status="completed", content=[text]
                )
            ]
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


def make_agent(tools: ToolqAgentTools, model: Model | None = None) -> Agent[Any]:
    return Agent(name="ops", model=model or ScriptedModel(), tools=list(tools.tools))


async def first_half(out: str, run_id: str) -> None:
    from tests.apps import registry

    with Client(registry, Settings()) as client:
        tools = ToolqAgentTools(client, run_id=run_id, tools=["echo", "wipe"])
        result = await Runner.run(make_agent(tools), "wipe prod and dev")
        assert result.interruptions, result.final_output
        with open(out, "w") as f:
            f.write(result.to_state().to_string())


if __name__ == "__main__":
    asyncio.run(first_half(sys.argv[1], sys.argv[2]))
