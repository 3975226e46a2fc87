"""pydantic-ai on toolq: a real agent (scripted FunctionModel) whose calls run on a worker.

Runs use ``asyncio.run(agent.run(...))``: ``run_sync`` keeps an event loop open that a later
``asyncio.run`` drops unclosed (a ResourceWarning, an error under this suite's filters).
"""

from __future__ import annotations

import asyncio
import json

import pytest
from pydantic_ai import DeferredToolRequests, DeferredToolResults, ToolApproved, ToolDenied
from pydantic_ai.messages import ModelMessagesTypeAdapter, ModelResponse, ToolCallPart
from pydantic_ai.models.function import FunctionModel

from tests.integrations.pai_agent import make_agent
from tests.integrations.support import executions, run_child
from toolq import CallStatus, Client
from toolq.integrations.pydantic_ai import METADATA_KEY, ToolqToolset

pytestmark = pytest.mark.e2e


def decisions() -> DeferredToolResults:
    return DeferredToolResults(
        approvals={
            "pai-wipe-1": ToolApproved(override_args={"target": "staging"}),
            "pai-wipe-2": ToolDenied("dev holds the only copy of the fixtures"),
        },
        metadata={"pai-wipe-1": {"approved_by": "alice"}},
    )


def check_finished(output: str, client: Client, run_id: str, r) -> None:
    read = json.loads(output)
    assert read["pai-echo"] == ["success", '{"text":"hi"}']
    assert read["pai-wipe-1"] == ["success", "wiped staging"]
    assert read["pai-wipe-2"][0] == "denied"
    assert "dev holds the only copy of the fixtures" in read["pai-wipe-2"][1]
    by_id = {res.tool_call_id: res for res in client.results(run_id)}
    assert set(by_id) == {"pai-echo", "pai-wipe-1", "pai-wipe-2"}  # one toolq call each
    wiped, kept = by_id["pai-wipe-1"], by_id["pai-wipe-2"]
    assert wiped.status is CallStatus.SUCCEEDED and wiped.output == "wiped staging"
    assert len(executions(r, wiped.call_id)) == 1
    request = client.approvals.get(wiped.call_id)
    assert request.arguments == {"target": "staging"}
    assert request.original_arguments == {"target": "prod"}
    assert request.decided_by == "alice"
    assert kept.status is CallStatus.DENIED
    assert "dev holds the only copy of the fixtures" in (kept.error or "")
    assert executions(r, kept.call_id) == []


def test_agent_pauses_for_approval_and_resumes(client, inproc, r):
    inproc.start()
    toolset = ToolqToolset(client, tools=["echo", "wipe"])
    agent = make_agent(toolset)
    first = asyncio.run(agent.run("wipe prod and dev"))
    requests = first.output
    assert isinstance(requests, DeferredToolRequests)
    assert sorted(p.tool_call_id for p in requests.approvals) == ["pai-wipe-1", "pai-wipe-2"]
    info = requests.metadata["pai-wipe-1"][METADATA_KEY]
    run_id = info["run_id"]
    assert run_id == first.conversation_id  # toolq run = the agent's conversation
    assert client.result(info["call_id"]).status is CallStatus.AWAITING_APPROVAL
    # the safe call ran already; the parked ones did not
    echo = next(res for res in client.results(run_id) if res.tool_call_id == "pai-echo")
    assert echo.status is CallStatus.SUCCEEDED and echo.output == {"text": "hi"}

    second = asyncio.run(
        agent.run(message_history=first.all_messages(), deferred_tool_results=decisions())
    )
    check_finished(second.output, client, run_id, r)
    assert [e for e in toolset.events(run_id) if e.call_id == info["call_id"]]


def test_resume_in_another_process(client, inproc, r, tmp_path, settings):
    inproc.start()
    out = tmp_path / "state.json"
    run_child("tests.integrations.pai_agent", settings, str(out))  # the first process, gone now
    state = json.loads(out.read_text())
    assert sorted(state["approvals"]) == ["pai-wipe-1", "pai-wipe-2"]
    run_id = state["metadata"]["pai-wipe-1"][METADATA_KEY]["run_id"]
    parked = state["metadata"]["pai-wipe-2"][METADATA_KEY]["call_id"]
    assert client.result(parked).status is CallStatus.AWAITING_APPROVAL

    messages = ModelMessagesTypeAdapter.validate_python(state["messages"])
    agent = make_agent(ToolqToolset(client, tools=["echo", "wipe"]))
    second = asyncio.run(agent.run(message_history=messages, deferred_tool_results=decisions()))
    check_finished(second.output, client, run_id, r)


def test_dashboard_decisions_resume_the_run(client, inproc, r):
    inproc.start()
    toolset = ToolqToolset(client, tools=["echo", "wipe"])
    agent = make_agent(toolset)

    async def scenario() -> str:
        first = await agent.run("wipe prod and dev")
        requests = first.output
        meta = requests.metadata
        # decided outside the agent, as the dashboard or the CLI would
        client.approvals.approve(
            meta["pai-wipe-1"][METADATA_KEY]["call_id"], by="alice",
            arguments={"target": "staging"},
        )
        client.approvals.deny(
            meta["pai-wipe-2"][METADATA_KEY]["call_id"], by="bob",
            reason="dev holds the only copy of the fixtures",
        )
        results = await toolset.deferred_results(requests)
        assert requests.remaining(results) is None
        history = first.all_messages()
        second = await agent.run(message_history=history, deferred_tool_results=results)
        return second.output

    read = json.loads(asyncio.run(scenario()))
    assert read["pai-wipe-1"] == ["success", "wiped staging"]
    assert read["pai-wipe-2"][0] == "denied" and "fixtures" in read["pai-wipe-2"][1]


def test_cancelling_the_run_cancels_the_toolq_call(client, inproc, r, wait_for):
    inproc.start()

    def slow_model(messages, info):
        return ModelResponse(parts=[ToolCallPart("slow", {"seconds": 30}, tool_call_id="pai-slow")])

    toolset = ToolqToolset(client, run_id="pai-cancel", tools=["slow"])
    agent = make_agent(toolset, FunctionModel(slow_model))

    async def scenario() -> None:
        task = asyncio.create_task(agent.run("sleep"))
        await asyncio.to_thread(
            wait_for,
            lambda: any(res.status is CallStatus.RUNNING for res in client.results("pai-cancel")),
            30,
        )
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    [result] = client.results("pai-cancel")
    wait_for(lambda: client.result(result.call_id).status.is_final, 15)
    assert client.result(result.call_id).status is CallStatus.CANCELLED
