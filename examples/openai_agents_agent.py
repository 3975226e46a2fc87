"""OpenAI Agents SDK on toolq: a parked call is a run interruption; a person decides; resume.

The person decides through the app's own approval screen, which holds a one-time decision
token the person asked the API for, not their API token. See ``examples/frameworks_tools.py``
for how to start the stack and what to export.
"""

from __future__ import annotations

import asyncio
import json
import os
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

from examples.frameworks_tools import person, registry
from toolq import ApprovalClient, Client, Settings
from toolq.integrations.openai_agents import ToolqAgentTools

set_tracing_disabled(True)


class Scripted(Model):
    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        outputs = [
            i for i in input if isinstance(i, dict) and i.get("type") == "function_call_output"
        ]
        if not outputs:
            output: list[Any] = [
                ResponseFunctionToolCall(
                    type="function_call",
                    call_id="c1",
                    name="lookup",
                    arguments=json.dumps({"user": "ann"}),
                    id="fc1",
                ),
                ResponseFunctionToolCall(
                    type="function_call",
                    call_id="c2",
                    name="delete_user",
                    arguments=json.dumps({"user": "ann"}),
                    id="fc2",
                ),
            ]
        else:
            text = ResponseOutputText(
                type="output_text",
                annotations=[],
                text=json.dumps({o["call_id"]: o["output"] for o in outputs}),
            )
            output = [
                ResponseOutputMessage(
                    type="message", id="m1", role="assistant", status="completed", content=[text]
                )
            ]
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


async def main() -> None:
    with Client(registry, Settings()) as client:  # the agent: Redis credentials only
        tools = ToolqAgentTools(client, run_id="example-agents-run")
        agent = Agent(name="ops", model=Scripted(), tools=list(tools.tools))
        first = await Runner.run(agent, "remove ann")
        state = first.to_state()
        for item in first.interruptions:
            call_id = tools.call_for(item)
            assert call_id is not None
            # The person asks the API for a token good for one decision on this call, as
            # them, and hands it to the app's approval screen.
            with person() as approver:
                reviewed = approver.get(call_id)  # what the person reviews
                grant = approver.decision_token(call_id, reviewed.digest)
            print("parked:", item.raw_item.name, "decision token for", grant.approver)
            # The app's screen: it shows the call and makes the person's one decision.
            url = os.environ.get("TOOLQ_API_URL", "http://127.0.0.1:8000")
            with ApprovalClient(url, grant.token) as screen:
                print("shown:", screen.get(call_id).arguments)
                screen.approve(call_id)  # exactly what it showed: a token approves no edit
            state.approve(item)  # tells the SDK to go on; toolq holds the decision
        result = await Runner.run(agent, state)
        print(result.final_output)


if __name__ == "__main__":
    asyncio.run(main())
