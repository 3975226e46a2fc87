"""pydantic-ai on toolq: a parked call ends the run; a person decides over HTTP; it resumes.

See ``examples/frameworks_tools.py`` for how to start the stack and what to export.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic_ai import Agent, DeferredToolRequests
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from examples.frameworks_tools import person, registry
from toolq import Client, Settings
from toolq.integrations.pydantic_ai import METADATA_KEY, ToolqToolset


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
    with Client(registry, Settings()) as client:  # the agent: Redis credentials only
        toolset = ToolqToolset(client)
        agent: Agent[None, Any] = Agent(
            FunctionModel(model),
            output_type=[str, DeferredToolRequests],  # type: ignore[arg-type]
            toolsets=[toolset],
        )
        first = await agent.run("remove ann")
        requests = first.output
        assert isinstance(requests, DeferredToolRequests)
        parked = [requests.metadata[p.tool_call_id][METADATA_KEY] for p in requests.approvals]

        # The person reviews what toolq holds and decides with their own token (an edit,
        # here); the API records them as the approver. The agent decides nothing.
        with person() as approver:
            for info in parked:
                request = approver.get(info["call_id"])
                print("parked:", request.name, request.arguments)
                approver.approve(
                    request.call_id, arguments={"user": "ann-test"}, digest=request.digest
                )

            # The agent resumes with the decisions toolq holds.
            results = await toolset.deferred_results(requests)
            second = await agent.run(
                message_history=first.all_messages(), deferred_tool_results=results
            )
            print(second.output)
            for info in parked:
                decided = approver.get(info["call_id"])
                result = client.result(info["call_id"])
                print(
                    f"{result.name} {decided.arguments} by {decided.decided_by}: "
                    f"{result.status.value}, {result.output}"
                )


if __name__ == "__main__":
    asyncio.run(main())
