"""LangChain/LangGraph on toolq: a real ``create_agent`` graph whose tool calls run on workers."""

from __future__ import annotations

import asyncio
import json

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from tests.integrations.lc_agent import ScriptedChatModel, load, make_agent
from tests.integrations.support import executions, run_child
from toolq import CallStatus, Client
from toolq.approvals.models import Approve, Deny
from toolq.integrations.langchain import approval_requests, resume_command, toolq_tools

pytestmark = pytest.mark.e2e

DECISIONS = {
    "lc-wipe-1": Approve(arguments={"target": "staging"}),
    "lc-wipe-2": Deny(reason="dev holds the only copy of the fixtures"),
}


def check_finished(out: dict, client: Client, run_id: str, r) -> None:
    read = json.loads(out["messages"][-1].content)
    assert read["lc-echo"] == ["success", '{"text": "hi"}']
    assert read["lc-wipe-1"] == ["success", "wiped staging"]
    assert read["lc-wipe-2"][0] == "error"
    assert "dev holds the only copy of the fixtures" in read["lc-wipe-2"][1]
    by_id = {res.tool_call_id: res for res in client.results(run_id)}
    assert set(by_id) == {"lc-echo", "lc-wipe-1", "lc-wipe-2"}
    wiped, kept = by_id["lc-wipe-1"], by_id["lc-wipe-2"]
    assert wiped.status is CallStatus.SUCCEEDED and wiped.output == "wiped staging"
    assert len(executions(r, wiped.call_id)) == 1
    request = client.approvals.get(wiped.call_id)
    assert request.arguments == {"target": "staging"}
    assert request.original_arguments == {"target": "prod"}
    assert kept.status is CallStatus.DENIED and executions(r, kept.call_id) == []


def test_graph_interrupts_for_approval_and_resumes(client, inproc, r):
    inproc.start()
    agent = make_agent(client, InMemorySaver())
    config = {"configurable": {"thread_id": "lc-thread-1"}}
    out = agent.invoke({"messages": [("user", "wipe prod and dev")]}, config)
    pending = approval_requests(out["__interrupt__"])
    assert sorted(pending) == ["lc-wipe-1", "lc-wipe-2"]
    assert pending["lc-wipe-1"].value["arguments"] == {"target": "prod"}
    assert pending["lc-wipe-1"].value["run_id"] == "lc-thread-1"  # toolq run = the thread
    for item in pending.values():
        assert client.result(item.value["call_id"]).status is CallStatus.AWAITING_APPROVAL
    # decisions keyed by tool call id, given in the opposite order of the calls
    command = resume_command(out["__interrupt__"], dict(reversed(list(DECISIONS.items()))))
    done = agent.invoke(command, config)
    check_finished(done, client, "lc-thread-1", r)


def test_async_graph_resumes_in_another_process(client, inproc, r, tmp_path, settings):
    inproc.start()
    path = tmp_path / "checkpoint.pickle"
    run_child("tests.integrations.lc_agent", settings, str(path), "lc-thread-2")
    agent = make_agent(client, load(str(path)))
    config = {"configurable": {"thread_id": "lc-thread-2"}}

    async def resume() -> dict:
        state = await agent.aget_state(config)
        interrupts = [i for task in state.tasks for i in task.interrupts]
        assert sorted(approval_requests(interrupts)) == ["lc-wipe-1", "lc-wipe-2"]
        return await agent.ainvoke(resume_command(interrupts, DECISIONS), config)

    check_finished(asyncio.run(resume()), client, "lc-thread-2", r)


def test_sync_tool_invoked_directly_keeps_the_call_id(client, inproc):
    inproc.start()
    [echo] = toolq_tools(client, run_id="lc-direct", tools=["echo"])
    message = echo.invoke(
        {"name": "echo", "args": {"text": "yo"}, "id": "lc-direct-1", "type": "tool_call"}
    )
    assert message.tool_call_id == "lc-direct-1" and json.loads(message.content) == {"text": "yo"}
    [result] = client.results("lc-direct")
    assert result.tool_call_id == "lc-direct-1" and result.status is CallStatus.SUCCEEDED
    bad = echo.invoke({"name": "echo", "args": {}, "id": "lc-direct-2", "type": "tool_call"})
    assert bad.status == "error" and "text" in bad.content


def test_cancelling_the_graph_task_cancels_the_toolq_call(client, inproc, wait_for):
    inproc.start()
    slow = [{"name": "slow", "args": {"seconds": 30}, "id": "lc-slow", "type": "tool_call"}]
    agent = make_agent(client, InMemorySaver(), first_turn=slow)
    config = {"configurable": {"thread_id": "lc-cancel"}}

    async def scenario() -> None:
        task = asyncio.create_task(agent.ainvoke({"messages": [("user", "sleep")]}, config))
        await asyncio.to_thread(
            wait_for,
            lambda: any(res.status is CallStatus.RUNNING for res in client.results("lc-cancel")),
            30,
        )
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    [result] = client.results("lc-cancel")
    wait_for(lambda: client.result(result.call_id).status.is_final, 15)
    assert client.result(result.call_id).status is CallStatus.CANCELLED


def test_scripted_model_is_a_chat_model():
    assert ScriptedChatModel().invoke("hi").tool_calls[0]["id"] == "lc-echo"
