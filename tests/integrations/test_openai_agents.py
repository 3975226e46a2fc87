"""OpenAI Agents SDK on toolq: a real agent (scripted Model) whose calls run on a worker."""

from __future__ import annotations

import asyncio
import json

import pytest
from agents import Runner, RunState

from tests.integrations.oa_agent import ScriptedModel, make_agent
from tests.integrations.support import executions, run_child
from toolq import CallStatus, Client
from toolq.integrations.openai_agents import ToolqAgentTools

pytestmark = pytest.mark.e2e


def by_call_id(interruptions) -> dict:
    return {item.raw_item.call_id: item for item in interruptions}


def decide(tools: ToolqAgentTools, state, interruptions) -> None:
    items = by_call_id(interruptions)
    assert sorted(items) == ["oa-wipe-1", "oa-wipe-2"]
    tools.reject(state, items["oa-wipe-2"], "dev holds the only copy of the fixtures")
    tools.approve(state, items["oa-wipe-1"], arguments={"target": "staging"}, by="alice")


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
    assert kept.status is CallStatus.DENIED and executions(r, kept.call_id) == []
    assert "dev holds the only copy of the fixtures" in (kept.error or "")


def test_run_is_interrupted_for_approval_and_resumes(client, inproc, r):
    inproc.start()
    tools = ToolqAgentTools(client, run_id="oa-run-1", tools=["echo", "wipe"])
    agent = make_agent(tools)

    async def scenario() -> str:
        first = await Runner.run(agent, "wipe prod and dev")
        items = by_call_id(first.interruptions)
        for call_id in ("oa-wipe-1", "oa-wipe-2"):
            parked = client.result(tools.call_for(items[call_id]))
            assert parked.status is CallStatus.AWAITING_APPROVAL
        state = first.to_state()
        decide(tools, state, first.interruptions)
        second = await Runner.run(agent, state)
        return str(second.final_output)

    check_finished(asyncio.run(scenario()), client, "oa-run-1", r)


def test_plain_state_approve_runs_the_parked_call(client, inproc, r):
    inproc.start()
    tools = ToolqAgentTools(client, run_id="oa-run-plain", tools=["echo", "wipe"])
    agent = make_agent(tools, ScriptedModel([("oa-wipe-1", "wipe", {"target": "prod"})]))

    async def scenario() -> str:
        first = await Runner.run(agent, "wipe prod")
        state = first.to_state()
        [item] = first.interruptions
        state.approve(item)
        return str((await Runner.run(agent, state)).final_output)

    assert json.loads(asyncio.run(scenario())) == {"oa-wipe-1": "wiped prod"}


def test_serialized_state_resumes_in_another_process(client, inproc, r, tmp_path, settings):
    inproc.start()
    path = tmp_path / "state.json"
    run_child("tests.integrations.oa_agent", settings, str(path), "oa-run-2")
    tools = ToolqAgentTools(client, run_id="oa-run-2", tools=["echo", "wipe"])
    agent = make_agent(tools)

    async def scenario() -> str:
        state = await RunState.from_string(agent, path.read_text())
        interruptions = state.get_interruptions()
        decide(tools, state, interruptions)
        return str((await Runner.run(agent, state)).final_output)

    check_finished(asyncio.run(scenario()), client, "oa-run-2", r)


def test_cancelling_the_run_cancels_the_toolq_call(client, inproc, wait_for):
    inproc.start()
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
