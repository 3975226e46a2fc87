"""OpenAI Agents SDK on toolq: a real agent (scripted Model) whose calls run on a worker,
decided by approvers over the real HTTP API, never by the agent's process."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from agents import Runner, RunState
from agents.items import ModelResponse
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from tests.integrations.oa_agent import ScriptedModel, make_agent
from tests.integrations.support import Approvers, executions, run_child
from toolq import CallStatus, Client
from toolq.errors import NotAuthorizedError
from toolq.integrations.openai_agents import ToolqAgentTools

pytestmark = pytest.mark.e2e


def by_call_id(interruptions) -> dict:
    return {item.raw_item.call_id: item for item in interruptions}


def decide(tools: ToolqAgentTools, approvers: Approvers, state, interruptions) -> None:
    """Alice approves wipe-1 with an edit over HTTP; the app rejects wipe-2 (withdrawn)."""
    items = by_call_id(interruptions)
    assert sorted(items) == ["oa-wipe-1", "oa-wipe-2"]
    call_id = tools.call_for(items["oa-wipe-1"])
    approvers.approve_shown("alice", call_id, arguments={"target": "staging"})
    state.approve(items["oa-wipe-1"])
    tools.reject(state, items["oa-wipe-2"], "dev holds the only copy of the fixtures")


def check_finished(output: str, client: Client, run_id: str, r) -> None:
    read = json.loads(output)
    assert json.loads(read["oa-echo"]) == {"text": "hi"}
    assert read["oa-wipe-1"] == "wiped staging"
    assert "dev holds the only copy of the fixtures" in read["oa-wipe-2"]
    by_id = {res.tool_call_id: res for res in client.results(run_id)}
    assert set(by_id) == {"oa-echo", "oa-wipe-1", "oa-wipe-2"}
    wiped, kept = by_id["oa-wipe-1"], by_id["oa-wipe-2"]
    assert wiped.status is CallStatus.SUCCEEDED and wiped.output == "wiped staging"
    assert len(executions(r, wiped.call_id)) == 1
    request = client.approvals.get(wiped.call_id)
    assert request.arguments == {"target": "staging"}
    assert request.original_arguments == {"target": "prod"}
    assert request.decided_by == "alice"
    # rejected in the SDK: withdrawn (cancelled), not denied by anyone
    assert kept.status is CallStatus.CANCELLED and executions(r, kept.call_id) == []
    assert client.approvals.get(kept.call_id).decided_by is None


def test_run_is_interrupted_people_decide_over_http_and_it_resumes(client, approvers, r):
    approvers.start()
    tools = ToolqAgentTools(client, run_id="oa-run-1", tools=["echo", "wipe"])
    agent = make_agent(tools)

    async def scenario() -> str:
        first = await Runner.run(agent, "wipe prod and dev")
        items = by_call_id(first.interruptions)
        for call_id in ("oa-wipe-1", "oa-wipe-2"):
            parked = client.result(tools.call_for(items[call_id]))
            assert parked.status is CallStatus.AWAITING_APPROVAL
        state = first.to_state()
        await asyncio.to_thread(decide, tools, approvers, state, first.interruptions)
        second = await Runner.run(agent, state)
        return str(second.final_output)

    check_finished(asyncio.run(scenario()), client, "oa-run-1", r)


def test_serialized_state_resumes_in_another_process(client, approvers, r, tmp_path, settings):
    approvers.start()
    path = tmp_path / "state.json"
    run_child("tests.integrations.oa_agent", settings, str(path), "oa-run-2")
    tools = ToolqAgentTools(client, run_id="oa-run-2", tools=["echo", "wipe"])
    agent = make_agent(tools)

    async def scenario() -> str:
        state = await RunState.from_string(agent, path.read_text())
        interruptions = state.get_interruptions()
        await asyncio.to_thread(decide, tools, approvers, state, interruptions)
        return str((await Runner.run(agent, state)).final_output)

    check_finished(asyncio.run(scenario()), client, "oa-run-2", r)


async def still_parked(client: Client, call_id: str, task: asyncio.Task, seconds: float) -> None:
    """The resumed run waits: the call stays parked, nothing runs, the task goes on."""
    await asyncio.sleep(seconds)
    assert not task.done(), task
    assert client.result(call_id).status is CallStatus.AWAITING_APPROVAL


def test_sdk_approval_waits_for_a_quorum_of_authenticated_approvers(client, approvers, r):
    approvers.start(quorum=2)
    tools = ToolqAgentTools(client, run_id="oa-quorum", tools=["wipe"])
    agent = make_agent(tools, ScriptedModel([("oa-q", "wipe", {"target": "prod"})]))

    async def scenario() -> tuple[str, str]:
        first = await Runner.run(agent, "wipe prod")
        [item] = first.interruptions
        call_id = tools.call_for(item)
        state = first.to_state()
        state.approve(item)  # the SDK's approval: the tool may run once toolq's call is approved
        task = asyncio.create_task(Runner.run(agent, state))
        await still_parked(client, call_id, task, 1.0)  # it once approved as openai-agents
        await asyncio.to_thread(approvers.approve_shown, "alice", call_id)
        await still_parked(client, call_id, task, 0.5)  # one of two
        with pytest.raises(NotAuthorizedError, match="already approved"):
            await asyncio.to_thread(approvers.approve_shown, "alice", call_id)  # counts once
        await still_parked(client, call_id, task, 0.2)
        await asyncio.to_thread(approvers.approve_shown, "bob", call_id)
        done = await asyncio.wait_for(task, 60)
        return call_id, str(done.final_output)

    call_id, output = asyncio.run(scenario())
    assert json.loads(output) == {"oa-q": "wiped prod"}
    request = client.approvals.get(call_id)
    assert request.approvals == ["alice", "bob"] and request.decided_by == "bob"
    assert len(executions(r, call_id)) == 1


def test_the_first_approvers_edit_is_what_runs(client, approvers, r):
    approvers.start(quorum=2)
    tools = ToolqAgentTools(client, run_id="oa-edit", tools=["wipe"])
    agent = make_agent(tools, ScriptedModel([("oa-e", "wipe", {"target": "prod-db"})]))

    async def scenario() -> tuple[str, str]:
        first = await Runner.run(agent, "wipe prod")
        [item] = first.interruptions
        call_id = tools.call_for(item)
        await asyncio.to_thread(
            approvers.approve_shown, "alice", call_id, arguments={"target": "test-db"}
        )
        state = first.to_state()
        state.approve(item)
        task = asyncio.create_task(Runner.run(agent, state))
        # the resume once re-approved the model's prod-db as an edit: bob would see prod
        await still_parked(client, call_id, task, 1.0)
        shown = await asyncio.to_thread(approvers.person("bob").get, call_id)
        assert shown.arguments == {"target": "test-db"}
        await asyncio.to_thread(approvers.person("bob").approve, call_id, digest=shown.digest)
        done = await asyncio.wait_for(task, 60)
        return call_id, str(done.final_output)

    call_id, output = asyncio.run(scenario())
    assert json.loads(output) == {"oa-e": "wiped test-db"}
    request = client.approvals.get(call_id)
    assert request.arguments == {"target": "test-db"}
    assert request.original_arguments == {"target": "prod-db"}
    assert request.approvals == ["alice", "bob"]


class ReusingModel(Model):
    """Asked to clean up, calls wipe(victim) as ``c1``; asked anything else later (a new SDK
    run of the same conversation, its history kept by the provider), calls the ungated echo
    under the same id ``c1``. Once it read an output, answers with the outputs it read."""

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        items = input if isinstance(input, list) else [{"role": "user", "content": input}]
        outputs = [
            item["output"]
            for item in items
            if isinstance(item, dict) and item.get("type") == "function_call_output"
        ]
        if outputs:
            text = ResponseOutputText(type="output_text", text=json.dumps(outputs), annotations=[])
            message = ResponseOutputMessage(
                type="message", id="m", role="assistant", status="completed", content=[text]
            )
            return ModelResponse(output=[message], usage=Usage(), response_id=None)
        asked = [item.get("content") for item in items if isinstance(item, dict)]
        name, arguments = (
            ("wipe", {"target": "victim"}) if "clean up" in asked else ("echo", {"text": "hi"})
        )
        call = ResponseFunctionToolCall(
            type="function_call", call_id="c1", name=name, arguments=json.dumps(arguments), id="fc1"
        )
        return ModelResponse(output=[call], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


def test_a_reused_call_id_after_a_plain_reject_runs_nothing(client, approvers, r):
    approvers.start()
    tools = ToolqAgentTools(client, run_id="oa-dup", tools=["echo", "wipe"])
    agent = make_agent(tools, ReusingModel())

    async def scenario() -> tuple[str, str]:
        first = await Runner.run(agent, "clean up")
        [item] = first.interruptions
        state = first.to_state()
        state.reject(item)  # plain: the toolq call stays parked
        rejected = await Runner.run(agent, state)
        # the next turn of the conversation: the model reuses c1 for the ungated echo, which
        # the SDK asks nobody about; the tools once approved the parked wipe for it
        later = await Runner.run(agent, "say hi")
        return str(rejected.final_output), str(later.final_output)

    rejected, later = asyncio.run(scenario())
    assert len(json.loads(rejected)) == 1  # the model read the SDK's rejection
    [reused] = json.loads(later)
    assert "already names another call" in reused and "wiped" not in reused
    [parked] = client.results("oa-dup")  # the echo was never dispatched
    assert parked.name == "wipe" and parked.status is CallStatus.AWAITING_APPROVAL
    assert executions(r, parked.call_id) == []
    assert client.approvals.get(parked.call_id).approvals == []


def test_cancelling_the_run_cancels_the_toolq_call(client, inproc, wait_for):
    # The call runs until the cancel: a worker starved past the suite's 2 s lease under
    # load would lose it (its call then 'unknown'), which is not what this test is about.
    inproc.start(lease_seconds=10.0)
    tools = ToolqAgentTools(client, run_id="oa-cancel", tools=["slow"])
    agent = make_agent(tools, ScriptedModel([("oa-slow", "slow", {"seconds": 30})]))

    async def scenario() -> None:
        task = asyncio.create_task(Runner.run(agent, "sleep"))
        await asyncio.to_thread(
            wait_for,
            lambda: any(res.status is CallStatus.RUNNING for res in client.results("oa-cancel")),
            30,
            f"never running: {client.results('oa-cancel')} {task}",
        )
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    [result] = client.results("oa-cancel")
    wait_for(lambda: client.result(result.call_id).status.is_final, 15)
    assert client.result(result.call_id).status is CallStatus.CANCELLED
