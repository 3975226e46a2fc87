"""pydantic-ai on toolq: the run pauses with DeferredToolRequests, resumes with decisions.

See ``examples/frameworks_tools.py`` for how to start the workers.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults, ToolApproved
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from examples.frameworks_tools import registry
from toolq import Client, Settings
from toolq.integrations.pydantic_ai import ToolqToolset


def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    if len(messages) == 1:
        return ModelResponse(
            parts=[
                ToolCallPart("lookup", {"user": "ann"}, tool_call_id="c1"),
                ToolCallPart("delete_user", {"user": "ann"}, tool_call_id="c2"),
            ]
        )
    return ModelResponse(parts=[TextPart(f"done after {len(messages)} messages")])


async def main() -> None:
    with Client(registry, Settings()) as client:
        agent: Agent[None, Any] = Agent(
            FunctionModel(model),
            output_type=[str, DeferredToolRequests],  # type: ignore[arg-type]
            toolsets=[ToolqToolset(client)],
        )
        first = await agent.run("remove ann")
        requests = first.output
        assert isinstance(requests, DeferredToolRequests)
        print("parked:", [p.tool_name for p in requests.approvals])
        # a person edits the arguments and approves
        decisions = DeferredToolResults(
            approvals={"c2": ToolApproved(override_args={"user": "ann-test"})}
        )
        second = await agent.run(
            message_history=first.all_messages(), deferred_tool_results=decisions
        )
        print(second.output)


if __name__ == "__main__":
    asyncio.run(main())
