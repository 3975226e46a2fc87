"""LangChain/LangGraph on toolq: a real ``create_agent`` graph whose tool calls run on workers,
decided by approvers over the real HTTP API, never by the graph."""

from __future__ import annotations

import asyncio
import json

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from tests.integrations.lc_agent import ScriptedChatModel, load, make_agent
from tests.integrations.support import Approvers, executions, run_child
from toolq import CallStatus, Client
from toolq.approvals.models import Approve, Deny
from toolq.errors import NotAuthorizedError
from toolq.integrations.langchain import approval_requests, resume_command, toolq_tools

pytestmark = pytest.mark.e2e

BIG = "x" * (6 * 1024 * 1024)  # past TOOLQ_MAX_PAYLOAD_BYTES (5 MiB)

ANSWERS = {
    "lc-wipe-1": True,
    "lc-wipe-2": Deny(reason="dev holds the only copy of the fixtures"),
}


def alice_edits(approvers: Approvers, pending: dict) -> None:
    """Alice approves wipe-1 with an edit, over HTTP with her own token."""
    request = pending["lc-wipe-1"].value
    approvers.person("alice").approve(
        request["call_id"], arguments={"target": "staging"}, digest=request["digest"]
    )


def check_finished(out: dict, client: Client, run_id: str, r) -> None:
    read = json.loads(out["messages"][-1].content)
    assert read["lc-echo"] == ["success", '{"text": "hi"}']
    assert read["lc-wipe-1"] == ["success", "wiped staging"]
    assert read["lc-wipe-2"] == ["error", "not run: dev holds the only copy of the fixtures"]
    by_id = {res.tool_call_id: res for res in client.results(run_id)}
    assert set(by_id) == {"lc-echo", "lc-wipe-1", "lc-wipe-2"}
    wiped, kept = by_id["lc-wipe-1"], by_id["lc-wipe-2"]
    assert wiped.status is CallStatus.SUCCEEDED and wiped.output == "wiped staging"
    assert len(executions(r, wiped.call_id)) == 1
    request = client.approvals.get(wiped.call_id)
    assert request.arguments == {"target": "staging"}
    assert request.original_arguments == {"target": "prod"}
    assert request.decided_by == "alice"
    # withdrawn by the graph: cancelled, denied by nobody
    assert kept.status is CallStatus.CANCELLED and executions(r, kept.call_id) == []
    assert client.approvals.get(kept.call_id).decided_by is None


def test_graph_interrupts_people_decide_over_http_and_it_resumes(client, approvers, r):
    approvers.start()
    agent = make_agent(client, InMemorySaver())
    config = {"configurable": {"thread_id": "lc-thread-1"}}
    out = agent.invoke({"messages": [("user", "wipe prod and dev")]}, config)
    pending = approval_requests(out["__interrupt__"])
    assert sorted(pending) == ["lc-wipe-1", "lc-wipe-2"]
    assert pending["lc-wipe-1"].value["arguments"] == {"target": "prod"}
    assert pending["lc-wipe-1"].value["run_id"] == "lc-thread-1"  # toolq run = the thread
    for item in pending.values():
        assert client.result(item.value["call_id"]).status is CallStatus.AWAITING_APPROVAL
    alice_edits(approvers, pending)
    # answers keyed by tool call id, given in the opposite order of the calls
    command = resume_command(out["__interrupt__"], dict(reversed(list(ANSWERS.items()))))
    done = agent.invoke(command, config)
    check_finished(done, client, "lc-thread-1", r)


def test_async_graph_resumes_in_another_process(client, approvers, r, tmp_path, settings):
    approvers.start()
    path = tmp_path / "checkpoint.pickle"
    run_child("tests.integrations.lc_agent", settings, str(path), "lc-thread-2")
    agent = make_agent(client, load(str(path)))
    config = {"configurable": {"thread_id": "lc-thread-2"}}

    async def resume() -> dict:
        state = await agent.aget_state(config)
        interrupts = [i for task in state.tasks for i in task.interrupts]
        pending = approval_requests(interrupts)
        assert sorted(pending) == ["lc-wipe-1", "lc-wipe-2"]
        await asyncio.to_thread(alice_edits, approvers, pending)
        return await agent.ainvoke(resume_command(interrupts, ANSWERS), config)

    check_finished(asyncio.run(resume()), client, "lc-thread-2", r)


def test_resuming_before_anyone_decided_interrupts_again(client, approvers, r):
    approvers.start()
    first_turn = [{"name": "wipe", "args": {"target": "prod"}, "id": "lc-w", "type": "tool_call"}]
    agent = make_agent(client, InMemorySaver(), first_turn=first_turn)
    config = {"configurable": {"thread_id": "lc-early"}}
    out = agent.invoke({"messages": [("user", "wipe prod")]}, config)
    call_id = approval_requests(out["__interrupt__"])["lc-w"].value["call_id"]
    # what used to approve the call in the graph's process, recorded as "langgraph"
    again = agent.invoke(resume_command(out["__interrupt__"], {"lc-w": True}), config)
    pending = approval_requests(again["__interrupt__"])
    assert list(pending) == ["lc-w"] and pending["lc-w"].value["call_id"] == call_id
    request = client.approvals.get(call_id)
    assert request.status is CallStatus.AWAITING_APPROVAL and request.approvals == []
    assert executions(r, call_id) == []

    approvers.approve_shown("alice", call_id)
    done = agent.invoke(resume_command(again["__interrupt__"], {"lc-w": Approve()}), config)
    assert json.loads(done["messages"][-1].content) == {"lc-w": ["success", "wiped prod"]}
    assert client.approvals.get(call_id).decided_by == "alice"


@pytest.mark.parametrize(
    "answer",
    [
        Approve(arguments={}),
        Approve(arguments={"target": "staging"}),
        Approve(always=True),
        {"kind": "approve", "arguments": {}},
        Deny(reason="no", always=True),
    ],
    ids=["empty-edit", "edit", "always", "empty-edit-dict", "deny-always"],
)
def test_a_resume_value_cannot_decide_or_edit(client, approvers, r, answer):
    approvers.start()
    first_turn = [{"name": "wipe", "args": {"target": "prod"}, "id": "lc-w", "type": "tool_call"}]
    agent = make_agent(client, InMemorySaver(), first_turn=first_turn)
    config = {"configurable": {"thread_id": "lc-edit"}}
    out = agent.invoke({"messages": [("user", "wipe prod")]}, config)
    call_id = approval_requests(out["__interrupt__"])["lc-w"].value["call_id"]
    approvers.approve_shown("alice", call_id)  # as shown
    [ran] = client.wait([call_id], timeout=30)  # decided and run before the app resumes
    assert ran.output == "wiped prod"
    with pytest.raises(NotAuthorizedError, match="is not applied"):
        agent.invoke(resume_command(out["__interrupt__"], {"lc-w": answer}), config)
    # {} is an edit to no arguments like any other: refused, never read as "no edit"
    request = client.approvals.get(call_id)
    assert request.arguments == {"target": "prod"} and request.original_arguments is None
    assert len(executions(r, call_id)) == 1


def test_a_reused_call_id_is_an_error_the_model_reads(client, approvers, r):
    approvers.start()
    parked = client.dispatch(
        [{"id": "lc-dup", "name": "wipe", "arguments": {"target": "prod"}}], run_id="lc-dup-run"
    ).call_ids[0]
    echo, wipe = toolq_tools(client, run_id="lc-dup-run", tools=["echo", "wipe"])
    reused = echo.invoke(
        {"name": "echo", "args": {"text": "hi"}, "id": "lc-dup", "type": "tool_call"}
    )
    assert reused.status == "error" and "already names another call" in reused.content
    other = wipe.invoke(
        {"name": "wipe", "args": {"target": "dev"}, "id": "lc-dup", "type": "tool_call"}
    )
    assert other.status == "error" and "already names another call" in other.content
    assert [res.call_id for res in client.results("lc-dup-run")] == [parked]
    assert client.result(parked).status is CallStatus.AWAITING_APPROVAL
    assert executions(r, parked) == []


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
    # The call runs until the cancel: a worker starved past the suite's 2 s lease under
    # load would lose it (its call then 'unknown'), which is not what this test is about.
    inproc.start(lease_seconds=10.0)
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


def test_a_call_over_the_payload_limit_is_an_error_the_model_reads(client, inproc):
    # toolq's PayloadError escaped the tool: the graph's run died with it, and the other
    # calls of the turn with it (as for a reused id, the model reads the refusal).
    inproc.start()
    [echo] = toolq_tools(client, run_id="lc-big", tools=["echo"])
    big = echo.invoke(
        {"name": "echo", "args": {"text": BIG}, "id": "lc-big-1", "type": "tool_call"}
    )
    assert big.status == "error" and "payload" in big.content and BIG not in big.content
    ok = echo.invoke(
        {"name": "echo", "args": {"text": "ok"}, "id": "lc-big-2", "type": "tool_call"}
    )
    assert json.loads(ok.content) == {"text": "ok"}
    assert [res.tool_call_id for res in client.results("lc-big")] == ["lc-big-2"]
