"""pydantic-ai on toolq: a real agent (scripted FunctionModel) whose calls run on a worker,
decided by approvers over the real HTTP API, never by the agent's process.

Runs use ``asyncio.run(agent.run(...))``: ``run_sync`` keeps an event loop open that a later
``asyncio.run`` drops unclosed (a ResourceWarning, an error under this suite's filters).
"""

from __future__ import annotations

import asyncio
import json

import pytest
from pydantic_ai import DeferredToolRequests, DeferredToolResults, ToolApproved, ToolDenied
from pydantic_ai.messages import (
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import FunctionModel

from tests.integrations.pai_agent import make_agent
from tests.integrations.support import Approvers, executions, run_child
from toolq import CallStatus, Client
from toolq.errors import NotAuthorizedError, NotAwaitingApprovalError
from toolq.integrations.pydantic_ai import METADATA_KEY, ToolqToolset

pytestmark = pytest.mark.e2e


def parked_call(requests: DeferredToolRequests, tool_call_id: str) -> dict:
    info: dict = requests.metadata[tool_call_id][METADATA_KEY]
    return info


def people_decide(approvers: Approvers, metadata: dict) -> None:
    """Alice approves wipe-1 with an edit, Bob denies wipe-2: each with their own token."""
    wipe1, wipe2 = metadata["pai-wipe-1"][METADATA_KEY], metadata["pai-wipe-2"][METADATA_KEY]
    approvers.person("alice").approve(
        wipe1["call_id"], arguments={"target": "staging"}, digest=wipe1["digest"]
    )
    approvers.person("bob").deny(wipe2["call_id"], "dev holds the only copy of the fixtures")


def check_finished(output: str, client: Client, run_id: str, r) -> None:
    read = json.loads(output)
    assert read["pai-echo"] == ["success", '{"text":"hi"}']
    assert read["pai-wipe-1"] == ["success", "wiped staging"]
    assert read["pai-wipe-2"][0] == "denied"
    assert "denied by bob: dev holds the only copy of the fixtures" in read["pai-wipe-2"][1]
    by_id = {res.tool_call_id: res for res in client.results(run_id)}
    assert set(by_id) == {"pai-echo", "pai-wipe-1", "pai-wipe-2"}  # one toolq call each
    wiped, kept = by_id["pai-wipe-1"], by_id["pai-wipe-2"]
    assert wiped.status is CallStatus.SUCCEEDED and wiped.output == "wiped staging"
    assert len(executions(r, wiped.call_id)) == 1
    request = client.approvals.get(wiped.call_id)
    assert request.arguments == {"target": "staging"}
    assert request.original_arguments == {"target": "prod"}
    assert request.decided_by == "alice"  # the principal the API authenticated
    assert kept.status is CallStatus.DENIED and executions(r, kept.call_id) == []


def test_agent_pauses_people_decide_over_http_and_it_resumes(client, approvers, r):
    approvers.start()
    toolset = ToolqToolset(client, tools=["echo", "wipe"])
    agent = make_agent(toolset)

    async def scenario() -> tuple[DeferredToolRequests, str, str]:
        first = await agent.run("wipe prod and dev")
        requests = first.output
        assert isinstance(requests, DeferredToolRequests)
        assert sorted(p.tool_call_id for p in requests.approvals) == ["pai-wipe-1", "pai-wipe-2"]
        people_decide(approvers, requests.metadata)
        results = await toolset.deferred_results(requests)
        assert requests.remaining(results) is None
        assert isinstance(results.approvals["pai-wipe-2"], ToolDenied)
        history = first.all_messages()
        second = await agent.run(message_history=history, deferred_tool_results=results)
        return requests, str(second.output), str(first.conversation_id)

    requests, output, conversation = asyncio.run(scenario())
    info = parked_call(requests, "pai-wipe-1")
    assert info["run_id"] == conversation  # toolq run = the agent's conversation
    check_finished(output, client, info["run_id"], r)
    assert [e for e in toolset.events(info["run_id"]) if e.call_id == info["call_id"]]


def test_resume_in_another_process(client, approvers, r, tmp_path, settings):
    approvers.start()
    out = tmp_path / "state.json"
    run_child("tests.integrations.pai_agent", settings, str(out))  # the first process, gone now
    state = json.loads(out.read_text())
    assert sorted(state["approvals"]) == ["pai-wipe-1", "pai-wipe-2"]
    run_id = state["metadata"]["pai-wipe-1"][METADATA_KEY]["run_id"]
    people_decide(approvers, state["metadata"])

    messages = ModelMessagesTypeAdapter.validate_python(state["messages"])
    toolset = ToolqToolset(client, tools=["echo", "wipe"])
    agent = make_agent(toolset)
    requests = DeferredToolRequests(
        approvals=[ToolCallPart("wipe", {}, tool_call_id=i) for i in state["approvals"]],
        metadata=state["metadata"],
    )

    async def resume() -> str:
        results = await toolset.deferred_results(requests)
        second = await agent.run(message_history=messages, deferred_tool_results=results)
        return str(second.output)

    check_finished(asyncio.run(resume()), client, run_id, r)


def test_approving_in_the_sdk_alone_decides_nothing(client, approvers, r):
    approvers.start()
    toolset = ToolqToolset(client, tools=["echo", "wipe"])
    agent = make_agent(toolset)
    # what used to approve the call in-process, signed and audited as alice
    claimed = DeferredToolResults(
        approvals={"pai-wipe-1": ToolApproved(), "pai-wipe-2": ToolApproved()},
        metadata={"pai-wipe-1": {"approved_by": "alice"}, "pai-wipe-2": {"approved_by": "alice"}},
    )

    async def scenario() -> tuple[DeferredToolRequests, object, object]:
        first = await agent.run("wipe prod and dev")
        again = await agent.run(message_history=first.all_messages(), deferred_tool_results=claimed)
        requests = again.output
        assert isinstance(requests, DeferredToolRequests), requests  # still parked: asked again
        for tool_call_id in ("pai-wipe-1", "pai-wipe-2"):
            call_id = parked_call(requests, tool_call_id)["call_id"]
            request = client.approvals.get(call_id)
            assert request.status is CallStatus.AWAITING_APPROVAL
            assert request.approvals == [] and executions(r, call_id) == []
        # alice decides for real, over HTTP; the same resume now goes on
        approvers.approve_shown("alice", parked_call(requests, "pai-wipe-1")["call_id"])
        approvers.person("alice").deny(parked_call(requests, "pai-wipe-2")["call_id"], "no")
        done = await agent.run(message_history=again.all_messages(), deferred_tool_results=claimed)
        return requests, done.output, again.output

    requests, output, _ = asyncio.run(scenario())
    read = json.loads(str(output))
    assert read["pai-wipe-1"] == ["success", "wiped prod"]
    assert read["pai-wipe-2"][0] == "failed" and "denied by alice: no" in read["pai-wipe-2"][1]
    wiped = client.approvals.get(parked_call(requests, "pai-wipe-1")["call_id"])
    assert wiped.decided_by == "alice" and wiped.approvals == ["alice"]


@pytest.mark.parametrize("override", [{}, {"target": "staging"}], ids=["empty", "other"])
def test_override_args_on_resume_are_refused(client, approvers, r, override):
    approvers.start()
    toolset = ToolqToolset(client, tools=["echo", "wipe"])
    agent = make_agent(toolset)

    async def scenario() -> str:
        first = await agent.run("wipe prod and dev")
        requests = first.output
        assert isinstance(requests, DeferredToolRequests)
        call_id = parked_call(requests, "pai-wipe-1")["call_id"]
        approvers.approve_shown("alice", call_id)  # the approver approved prod as shown
        edit = DeferredToolResults(
            approvals={"pai-wipe-1": ToolApproved(override_args=override), "pai-wipe-2": False}
        )
        with pytest.raises(NotAuthorizedError, match="an edit is not applied"):
            await agent.run(message_history=first.all_messages(), deferred_tool_results=edit)
        return call_id

    call_id = asyncio.run(scenario())
    # {} is an edit to no arguments like any other: refused, never read as "no edit"
    request = client.approvals.get(call_id)
    assert request.arguments == {"target": "prod"} and request.original_arguments is None


def test_tool_denied_withdraws_the_call_and_denies_nothing(client, approvers, r):
    approvers.start()
    toolset = ToolqToolset(client, tools=["echo", "wipe"])
    agent = make_agent(toolset)

    async def scenario() -> tuple[str, str]:
        first = await agent.run("wipe prod and dev")
        requests = first.output
        assert isinstance(requests, DeferredToolRequests)
        call_id = parked_call(requests, "pai-wipe-1")["call_id"]
        approvers.approve_shown("alice", parked_call(requests, "pai-wipe-2")["call_id"])
        answers = DeferredToolResults(
            approvals={"pai-wipe-1": ToolDenied("not today"), "pai-wipe-2": ToolApproved()}
        )
        done = await agent.run(message_history=first.all_messages(), deferred_tool_results=answers)
        return call_id, str(done.output)

    call_id, output = asyncio.run(scenario())
    read = json.loads(output)
    assert read["pai-wipe-1"] == ["denied", "not today"]
    assert read["pai-wipe-2"] == ["success", "wiped dev"]
    withdrawn = client.result(call_id)
    assert withdrawn.status is CallStatus.CANCELLED and executions(r, call_id) == []
    request = client.approvals.get(call_id)
    assert request.decided_by is None and request.approvals == []  # nobody denied it
    with pytest.raises(NotAwaitingApprovalError):
        approvers.approve_shown("bob", call_id)  # too late: it can never run


def reuse_model(second_turn: ToolCallPart) -> FunctionModel:
    """Turn 1 calls wipe(prod) as ``dup-1``; a later run reuses ``dup-1`` for another call."""

    def model(messages, info) -> ModelResponse:
        returned = [
            p
            for m in messages
            if isinstance(m, ModelRequest)
            for p in m.parts
            if isinstance(p, ToolReturnPart)
        ]
        if returned:
            read = {p.tool_call_id: [p.outcome, p.model_response_str()] for p in returned}
            return ModelResponse(parts=[TextPart(json.dumps(read))])
        prompt = str(messages[-1].parts[-1].content)
        if prompt == "wipe prod":
            return ModelResponse(parts=[ToolCallPart("wipe", {"target": "prod"}, "dup-1")])
        return ModelResponse(parts=[second_turn])

    return FunctionModel(model)


@pytest.mark.parametrize(
    "second_turn",
    [
        ToolCallPart("echo", {"text": "hi"}, tool_call_id="dup-1"),
        ToolCallPart("wipe", {"target": "dev"}, tool_call_id="dup-1"),
    ],
    ids=["other-tool", "other-arguments"],
)
def test_a_reused_call_id_never_reaches_the_parked_call(client, approvers, r, second_turn):
    approvers.start()
    toolset = ToolqToolset(client, run_id="pai-dup", tools=["echo", "wipe"])
    agent = make_agent(toolset, reuse_model(second_turn))

    async def scenario() -> object:
        first = await agent.run("wipe prod")
        assert isinstance(first.output, DeferredToolRequests)  # parked, never resumed
        # a later run of the same toolq run: the model reuses the id. Once it showed the
        # human lookup(...) for approval, and approving that ran the parked wipe.
        second = await agent.run("look ann up")
        return second.output

    output = asyncio.run(scenario())
    assert isinstance(output, str), output  # nothing to approve: an error the model reads
    read = json.loads(output)
    assert read["dup-1"][0] == "failed"
    assert "already names another call" in read["dup-1"][1]
    [parked] = client.results("pai-dup")  # only the first call exists
    assert parked.name == "wipe" and parked.status is CallStatus.AWAITING_APPROVAL
    assert executions(r, parked.call_id) == []
    assert client.approvals.get(parked.call_id).arguments == {"target": "prod"}


def test_cancelling_the_run_cancels_the_toolq_call(client, inproc, r, wait_for):
    # The call runs until the cancel: a worker starved past the suite's 2 s lease under
    # load would lose it (its call then 'unknown'), which is not what this test is about.
    inproc.start(lease_seconds=10.0)

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


BIG = "x" * (6 * 1024 * 1024)  # past TOOLQ_MAX_PAYLOAD_BYTES (5 MiB)


def test_a_call_over_the_payload_limit_is_an_error_the_model_reads(client, inproc, r):
    # toolq's PayloadError escaped call_tool: the agent's run raised, and the well-formed
    # call of the same turn was lost with it.
    inproc.start()
    toolset = ToolqToolset(client, run_id="pai-big", tools=["echo"])

    def model(messages, info) -> ModelResponse:
        returned = [
            p
            for m in messages
            if isinstance(m, ModelRequest)
            for p in m.parts
            if isinstance(p, ToolReturnPart)
        ]
        if returned:
            read = {p.tool_call_id: [p.outcome, p.model_response_str()] for p in returned}
            return ModelResponse(parts=[TextPart(json.dumps(read))])
        return ModelResponse(
            parts=[
                ToolCallPart("echo", {"text": BIG}, tool_call_id="big-1"),
                ToolCallPart("echo", {"text": "ok"}, tool_call_id="big-2"),
            ]
        )

    agent = make_agent(toolset, FunctionModel(model))
    output = asyncio.run(agent.run("go")).output
    assert isinstance(output, str), output
    read = json.loads(output)
    assert read["big-1"][0] == "failed" and "payload" in read["big-1"][1]
    assert BIG not in read["big-1"][1]
    assert read["big-2"] == ["success", '{"text":"ok"}']
    assert [res.tool_call_id for res in client.results("pai-big")] == ["big-2"]


def test_a_cancel_while_a_parked_call_is_read_leaves_it_parked(client, r):
    # call_tool reads a parked call's request (a thread) before raising ApprovalRequired;
    # a cancel of the run in that read withdrew the call nobody had decided (as the OpenAI
    # Agents adapter did for a resume waiting on a person).
    import threading

    toolset = ToolqToolset(client, run_id="pai-read-cancel", tools=["wipe"])
    reading, release = threading.Event(), threading.Event()
    real = toolset.bridge.request

    def held(call_id: str):  # the read, held open until the run is cancelled
        reading.set()
        release.wait(10)
        return real(call_id)

    toolset.bridge.request = held  # type: ignore[method-assign]

    def model(messages, info) -> ModelResponse:
        return ModelResponse(parts=[ToolCallPart("wipe", {"target": "prod"}, tool_call_id="rc-1")])

    agent = make_agent(toolset, FunctionModel(model))

    async def scenario() -> None:
        task = asyncio.create_task(agent.run("wipe"))
        await asyncio.to_thread(reading.wait, 30)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        release.set()

    asyncio.run(scenario())
    [parked] = client.results("pai-read-cancel")
    assert parked.status is CallStatus.AWAITING_APPROVAL
    assert executions(r, parked.call_id) == []
