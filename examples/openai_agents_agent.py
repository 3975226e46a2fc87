"""OpenAI Agents SDK on toolq: a parked call is a run interruption; approve and resume.

See ``examples/frameworks_tools.py`` for how to start the workers.
"""

from __future__ import annotations

import asyncio
import json
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

from examples.frameworks_tools import registry
from toolq import Client, Settings
from toolq.integrations.openai_agents import ToolqAgentTools

set_tracing_disabled(True)


class Scripted(Model):
    async def get_response(self, system_instructions: Any, input: Any, *args: Any,
                           **kwargs: Any) -> ModelResponse:
        outputs = [i for i in input if isinstance(i, dict)
                   and i.get("type") == "function_call_output"]
        if not outputs:
            output: list[Any] = [
                ResponseFunctionToolCall(type="function_call", call_id="c1", name="lookup",
                                         arguments=json.dumps({"user": "ann"}), id="fc1"),
                ResponseFunctionToolCall(type="function_call", call_id="c2", name="delete_user",
                                         arguments=json.dumps({"user": "ann"}), id="fc2"),
            ]
        else:
            text = ResponseOutputText(type="output_text", annotations=[],
                                      text=json.dumps({o["call_id"]: o["output"] for o in outputs}))
            output = [ResponseOutputMessage(type="message", id="m1", role="assistant",
                                            status="completed", content=[text])]
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


async def main() -> None:
    with Client(registry, Settings()) as client:
        tools = ToolqAgentTools(client, run_id="example-agents-run")
        agent = Agent(name="ops", model=Scripted(), tools=list(tools.tools))
        first = await Runner.run(agent, "remove ann")
        state = first.to_state()
        for item in first.interruptions:
            print("parked:", item.raw_item.call_id)
            tools.approve(state, item, arguments={"user": "ann-test"})
        result = await Runner.run(agent, state)
        print(result.final_output)


if __name__ == "__main__":
    asyncio.run(main())
