"""Attacks on the framework adapters' gates and resume paths, against real processes.

The people's side is the real HTTP API (the only holder of the signing key) and real
``toolq worker`` processes that verify its signatures; the agent's side is the suite's plain
``client`` (Redis credentials only). Each test states what the adapter promises and checks
it through the adapter, the way an app drives its framework.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import threading
from typing import Annotated, Any, TypedDict

import pytest
from agents import Runner, RunState
from langchain_core.messages import AIMessage, AnyMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode
from langgraph.types import Command
from pydantic_ai import DeferredToolRequests, DeferredToolResults, ToolApproved

from tests.conftest import ROOT, Workers, make_settings, serve
from tests.integrations.lc_agent import make_agent as make_lc_agent
from tests.integrations.oa_agent import ScriptedModel
from tests.integrations.oa_agent import make_agent as make_oa_agent
from tests.integrations.pai_agent import make_agent as make_pai_agent
from tests.integrations.support import APPROVER_TOKENS, Approvers, child_env, executions
from toolq import CallStatus, Client
from toolq.api.app import create_app
from toolq.approvals.models import Deny
from toolq.cli.common import load_registry
from toolq.errors import ConfigurationError, NotAwaitingApprovalError
from toolq.integrations.langchain import approval_requests, resume_command, toolq_tools
from toolq.integrations.openai_agents import ToolqAgentTools
from toolq.integrations.pydantic_ai import METADATA_KEY, ToolqToolset

pytestmark = pytest.mark.e2e

APP = "tests.apps:registry"


def people(approvers: Approvers, workers: Workers, risk: str = "safe,moderate,dangerous") -> None:
    """The API (signing) and real verifying ``toolq worker`` processes for ``risk``."""
    start_workers(approvers, workers, risk)
    settings = make_settings(approval_signing_key=approvers.signing, dangerous_approvals=1)
    api = create_app(settings, load_registry(APP), tokens=APPROVER_TOKENS)
    approvers.url = approvers._closing.enter_context(contextlib.contextmanager(serve)(api))


def start_workers(approvers: Approvers, workers: Workers, risk: str) -> None:
    workers.start(
        risk,
        TOOLQ_APPROVAL_VERIFY_KEYS=approvers.verify,
        TOOLQ_DANGEROUS_APPROVALS="1",
    )


# -- LangGraph ---------------------------------------------------------------------------


class Direct(TypedDict, total=False):
    out: str


def direct_graph(client: Client) -> Any:
    """A graph whose node invokes the toolq tool directly, as any ``BaseTool`` is invoked."""
    [wipe] = toolq_tools(client, tools=["wipe"])

    def node(state: Direct, config: RunnableConfig) -> Direct:
        return {"out": wipe.invoke({"target": "prod"}, config)}

    graph = StateGraph(Direct)
    graph.add_node("wipe", node)
    graph.add_edge(START, "wipe")
    graph.add_edge("wipe", END)
    return graph.compile(checkpointer=InMemorySaver())


def test_a_resumed_graph_node_waits_for_the_approved_call_instead_of_dispatching_another(
    client, approvers, workers, r
):
    """LangGraph re-runs a node from its start on every resume. A ``ToolqTool`` invoked with
    its arguments (no ``ToolCall``, so no provider call id) must find the call it dispatched
    before, as the docs promise for every resume, not dispatch a fresh one under a new
    random id: that leaves the approved call running with nobody reading its result, and
    asks the approver to approve the same dangerous call a second time."""
    people(approvers, workers)
    graph = direct_graph(client)
    config = {"configurable": {"thread_id": "lc-direct-resume"}}
    out = graph.invoke({}, config)
    [parked] = out["__interrupt__"]
    call_id = parked.value["call_id"]
    approvers.approve_shown("alice", call_id)  # alice approves wipe(prod), once

    done = graph.invoke(Command(resume=True), config)

    calls = client.results("lc-direct-resume")
    ran = client.wait([call_id], timeout=60)[0]
    assert ran.status is CallStatus.SUCCEEDED and len(executions(r, call_id)) == 1
    assert [c.call_id for c in calls] == [call_id], (
        "the resume dispatched another wipe(prod): "
        f"{[(c.call_id, c.tool_call_id, c.status.value) for c in calls]}"
    )
    assert "__interrupt__" not in done, done["__interrupt__"]  # not asked to approve again
    assert done["out"] == "wiped prod"  # the approved call's result reaches the graph


def test_a_withdrawal_given_after_an_earlier_go_on_is_not_dropped_on_replay(
    client, approvers, workers, r, wait_for
):
    """``Deny(reason=...)`` withdraws the call (cancelled unless final already) and the model
    reads the reason; "every resume value is read and checked, even one given after the
    approver decided". Here the app first answers go-on before anyone decided (the graph is
    interrupted again), then alice approves in toolq, then the app withdraws the call while
    it is still queued (no dangerous worker has taken it yet). On replay the adapter reads
    the first answer, sees toolq decided, stops reading answers and waits: the withdrawal is
    dropped and the call runs; the model reads "wiped prod"."""
    people(approvers, workers, risk="safe,moderate")  # a dangerous call stays queued
    first_turn = [{"name": "wipe", "args": {"target": "prod"}, "id": "lc-w", "type": "tool_call"}]
    agent = make_lc_agent(client, InMemorySaver(), first_turn=first_turn)
    config = {"configurable": {"thread_id": "lc-late-deny"}}
    out = agent.invoke({"messages": [("user", "wipe prod")]}, config)
    call_id = approval_requests(out["__interrupt__"])["lc-w"].value["call_id"]
    again = agent.invoke(resume_command(out["__interrupt__"], {"lc-w": True}), config)
    assert list(approval_requests(again["__interrupt__"])) == ["lc-w"]  # still undecided

    approvers.approve_shown("alice", call_id)
    assert client.result(call_id).status is CallStatus.QUEUED  # approved, not started

    withdraw = resume_command(again["__interrupt__"], {"lc-w": Deny(reason="changed my mind")})
    finished: dict[str, Any] = {}
    resumed = threading.Thread(
        target=lambda: finished.update(out=agent.invoke(withdraw, config)), daemon=True
    )
    resumed.start()
    resumed.join(20)  # a withdrawal is one Redis write: the graph goes on at once
    withdrawn_in_time = not resumed.is_alive()
    status_then = client.result(call_id).status
    if not withdrawn_in_time:
        start_workers(approvers, workers, "dangerous")  # the graph waits for it: let it run
        resumed.join(60)
    assert not resumed.is_alive()
    read = json.loads(finished["out"]["messages"][-1].content)
    assert withdrawn_in_time, (
        f"the graph ignored the withdrawal and waited on the {status_then.value} call; "
        f"the model read {read['lc-w']}, executions: {executions(r, call_id)}"
    )
    assert read["lc-w"] == ["error", "not run: changed my mind"]
    assert client.result(call_id).status is CallStatus.CANCELLED
    assert executions(r, call_id) == []


class Conversation(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def tool_node_graph(client: Client) -> Any:
    """A hand-built agent graph with LangGraph's prebuilt ``ToolNode`` (the docs name it):
    the model calls wipe(prod) as ``w1`` and wipe(dev) as ``w2`` at once, then answers
    with what it read, ``{tool_call_id: [status, content]}``."""

    def model(state: Conversation) -> Conversation:
        read = {
            m.tool_call_id: [m.status, m.content] for m in state["messages"] if m.type == "tool"
        }
        if read:
            return {"messages": [AIMessage(content=json.dumps(read))]}
        calls = [
            {"name": "wipe", "args": {"target": "prod"}, "id": "w1", "type": "tool_call"},
            {"name": "wipe", "args": {"target": "dev"}, "id": "w2", "type": "tool_call"},
        ]
        return {"messages": [AIMessage(content="", tool_calls=calls)]}

    graph = StateGraph(Conversation)
    graph.add_node("model", model)
    graph.add_node("tools", ToolNode(toolq_tools(client, tools=["wipe"])))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", lambda s: "tools" if s["messages"][-1].tool_calls else END)
    graph.add_edge("tools", "model")
    return graph.compile(checkpointer=InMemorySaver())


def test_a_withdrawal_of_one_parallel_call_never_lands_on_another(client, approvers, workers, r):
    """ "Parallel calls are matched by call id, never by position." In a ``ToolNode`` both
    calls interrupt inside one LangGraph task, where resume values are matched by their
    order. The app answers only ``w1``: go on (nobody decided yet), then, once alice
    approved it, withdraw it. On replay ``w1`` reads only its first answer (toolq decided)
    and ``w2`` reads the withdrawal meant for ``w1``: wipe(dev), which the app never
    answered, is cancelled with the app's reason, and wipe(prod), which it withdrew, runs."""
    people(approvers, workers, risk="safe,moderate")  # an approved wipe stays queued
    graph = tool_node_graph(client)
    config = {"configurable": {"thread_id": "lc-toolnode"}}

    async def scenario() -> dict[str, Any]:
        out = await graph.ainvoke({"messages": [("user", "wipe prod and dev")]}, config)
        assert list(approval_requests(out["__interrupt__"])) == ["w1"]
        ids = {res.tool_call_id: res.call_id for res in client.results("lc-toolnode")}
        out = await graph.ainvoke(resume_command(out["__interrupt__"], {"w1": True}), config)
        assert list(approval_requests(out["__interrupt__"])) == ["w1"]  # still undecided
        await asyncio.to_thread(approvers.approve_shown, "alice", ids["w1"])
        withdraw = resume_command(out["__interrupt__"], {"w1": Deny(reason="changed my mind")})
        task = asyncio.create_task(graph.ainvoke(withdraw, config))
        done, _ = await asyncio.wait({task}, timeout=20)  # a withdrawal is one Redis write
        status = {k: client.result(v).status for k, v in ids.items()}
        if not done:  # the graph waits on a call: let a dangerous worker take it
            await asyncio.to_thread(start_workers, approvers, workers, "dangerous")
        final = await asyncio.wait_for(task, 60)
        return {"ids": ids, "status": status, "final": final}

    got = asyncio.run(scenario())
    ids, status = got["ids"], got["status"]
    read = (
        json.loads(got["final"]["messages"][-1].content)
        if not got["final"].get("__interrupt__")
        else {}
    )
    assert status["w2"] is CallStatus.AWAITING_APPROVAL, (
        f"the app answered only w1, yet w2 (wipe dev) is {status['w2'].value}; "
        f"w1 (wipe prod, withdrawn) is {client.result(ids['w1']).status.value} with "
        f"executions {executions(r, ids['w1'])}; the model read {read}"
    )
    assert status["w1"] is CallStatus.CANCELLED and executions(r, ids["w1"]) == []


# -- pydantic-ai ---------------------------------------------------------------------------


def test_tool_denied_withdraws_the_call_even_when_another_call_defers_the_run_again(
    client, approvers, workers, r
):
    """The app's no (``toolset.deny``) withdraws the call ("cancelled unless final already ...
    no later approval can run it"). The docs' pattern, resuming before every call is decided,
    answers the undecided one ``ToolApproved()`` (it defers again) and the app denies the
    other. The resumed run then ends with ``DeferredToolRequests`` before any step calls
    ``get_tools`` (where a plain ``ToolDenied`` is withdrawn): were the denied call left
    parked, an approver who never heard of the app's no could approve it, it would run, and
    at the next resume the model would read "denied: not today" for a wipe that ran."""
    people(approvers, workers)
    toolset = ToolqToolset(client, tools=["echo", "wipe"])
    agent = make_pai_agent(toolset)

    async def scenario() -> dict[str, Any]:
        first = await agent.run("wipe prod and dev")
        requests = first.output
        assert isinstance(requests, DeferredToolRequests)
        ids = {k: v[METADATA_KEY]["call_id"] for k, v in requests.metadata.items()}
        answers = DeferredToolResults(
            approvals={
                "pai-wipe-1": ToolApproved(),
                "pai-wipe-2": await toolset.deny(requests, "pai-wipe-2", "not today"),
            }
        )
        second = await agent.run(
            message_history=first.all_messages(), deferred_tool_results=answers
        )
        assert isinstance(second.output, DeferredToolRequests)  # wipe-1 is still undecided
        after_deny = client.result(ids["pai-wipe-2"]).status
        try:  # bob reviews the dashboard's parked calls
            await asyncio.to_thread(approvers.approve_shown, "bob", ids["pai-wipe-2"])
            bob_ran_it = True
            await asyncio.to_thread(lambda: client.wait([ids["pai-wipe-2"]], timeout=60))
        except NotAwaitingApprovalError:
            bob_ran_it = False  # withdrawn: no later approval can run it
        await asyncio.to_thread(approvers.approve_shown, "alice", ids["pai-wipe-1"])
        third = await agent.run(
            message_history=second.all_messages(),
            deferred_tool_results=DeferredToolResults(approvals={"pai-wipe-1": ToolApproved()}),
        )
        return {
            "ids": ids,
            "after_deny": after_deny,
            "bob_ran_it": bob_ran_it,
            "read": json.loads(str(third.output)),
        }

    got = asyncio.run(scenario())
    denied = got["ids"]["pai-wipe-2"]
    read = got["read"]
    assert read["pai-wipe-1"] == ["success", "wiped prod"]
    assert read["pai-wipe-2"] == ["denied", "not today"]  # what the model was told
    assert not got["bob_ran_it"] and executions(r, denied) == [], (
        f"the app denied wipe(dev) (left {got['after_deny'].value} after the resume), bob "
        f"approved it, it ran ({executions(r, denied)}, {client.result(denied).output!r}), "
        f"and the model read {read['pai-wipe-2']}"
    )
    assert client.result(denied).status is CallStatus.CANCELLED


# -- OpenAI Agents SDK ---------------------------------------------------------------------

OA_FIRST_HALF = """
import asyncio, sys
from agents import Runner
from tests.apps import registry
from tests.integrations.oa_agent import ScriptedModel, make_agent
from toolq import Client, Settings
from toolq.integrations.openai_agents import ToolqAgentTools

async def main():
    with Client(registry, Settings()) as client:
        tools = ToolqAgentTools(client, run_id=sys.argv[2], tools=["wipe"])  # at the app's start
        model = ScriptedModel([("oa-w", "wipe", {"target": "prod"})])
        result = await Runner.run(make_agent(tools, model), "wipe prod")
        assert result.interruptions, result.final_output
        with open(sys.argv[1], "w") as f:
            f.write(result.to_state().to_string())

asyncio.run(main())
"""


def test_a_run_state_resumed_in_another_process_never_dispatches_the_call_again(
    client, approvers, workers, r, tmp_path, settings
):
    """ "A ``RunState`` serialized and resumed in another process finds the same parked call."
    The SDK names no run of its own: ``ToolqAgentTools`` without a ``run_id`` would make up a
    random run per process, and the resumed process would look for the model's call id in a
    run of its own, dispatch wipe(prod) a second time and wait on that one while the call
    alice approved runs with nobody reading its result. So it is refused without a run; with
    the conversation's run, the resume finds the approved call and reads its result."""
    with pytest.raises(ConfigurationError, match="run_id"):
        ToolqAgentTools(client, tools=["wipe"])
    people(approvers, workers)
    path = tmp_path / "state.json"
    done = subprocess.run(
        [sys.executable, "-c", OA_FIRST_HALF, str(path), "oa-resumed"],
        env=child_env(settings), cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    parked = [
        res
        for res in client.approvals.pending()
        if res.name == "wipe" and res.arguments == {"target": "prod"}
    ]
    assert len(parked) == 1, parked
    call_id = parked[0].call_id
    approvers.approve_shown("alice", call_id)  # the person approves what the first process parked

    tools = ToolqAgentTools(client, run_id="oa-resumed", tools=["wipe"])  # the resuming process
    agent = make_oa_agent(tools, ScriptedModel([("oa-w", "wipe", {"target": "prod"})]))

    async def resume() -> str | None:
        state = await RunState.from_string(agent, path.read_text())
        [item] = state.get_interruptions()
        state.approve(item)
        try:
            return str((await asyncio.wait_for(Runner.run(agent, state), 20)).final_output)
        except TimeoutError:
            return None  # still waiting on something nobody approved (cancelled with the task)

    output = asyncio.run(resume())
    client.wait([call_id], timeout=60)
    dispatched = [(res.call_id, res.status.value) for res in client.results("oa-resumed")]
    assert dispatched == [(call_id, "succeeded")], dispatched
    assert len(executions(r, call_id)) == 1
    assert output is not None and json.loads(output) == {"oa-w": "wiped prod"}
