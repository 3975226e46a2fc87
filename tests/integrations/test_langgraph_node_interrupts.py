"""A LangGraph node that asks its own question with ``interrupt()`` and calls a toolq tool.

LangGraph hands a task's resume values out by the order of its ``interrupt()`` calls, and
the node's own question is one of them. The tool's own answers (approved in toolq, the app
says go on) must let the node finish: the graph must not pause again and again for a call
that toolq already decided.
"""

from __future__ import annotations

from typing import Any, TypedDict

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from tests.integrations.support import executions
from toolq import CallStatus, Client
from toolq.integrations.langchain import resume_command, toolq_tools

pytestmark = pytest.mark.e2e


class State(TypedDict, total=False):
    out: str


def asks_first(client: Client) -> Any:
    """The node asks "wipe prod?" itself, then invokes the toolq tool (the docs' direct use)."""
    [wipe] = toolq_tools(client, tools=["wipe"])

    def node(state: State, config: RunnableConfig) -> State:
        if not interrupt("wipe prod?"):
            return {"out": "skipped"}
        return {"out": wipe.invoke({"target": "prod"}, config)}

    graph = StateGraph(State)
    graph.add_node("wipe", node)
    graph.add_edge(START, "wipe")
    graph.add_edge("wipe", END)
    return graph.compile(checkpointer=InMemorySaver())


def test_a_node_asking_its_own_question_first_finishes_once_the_call_is_approved(
    client, approvers, r
):
    """The node's question is answered by its interrupt id, the tool's by ``resume_command``
    (the docs' way to answer toolq interrupts). Alice approved the call; the app says go on.
    The adapter counts the node's answer among the "plain" values the tool must read before
    it goes on, but the node read it: every go-on pauses the graph again, forever."""
    approvers.start()
    graph = asks_first(client)
    config = {"configurable": {"thread_id": "lc-asks-first"}}
    out = graph.invoke({}, config)
    [question] = out["__interrupt__"]
    assert question.value == "wipe prod?"
    out = graph.invoke(Command(resume={question.id: True}), config)  # yes, the node goes on
    [parked] = out["__interrupt__"]
    call_id, tool_call_id = parked.value["call_id"], parked.value["tool_call_id"]
    approvers.approve_shown("alice", call_id)
    pauses = []
    for _ in range(3):  # the app says go on for the approved call, up to three times
        out = graph.invoke(resume_command(out["__interrupt__"], {tool_call_id: True}), config)
        if "__interrupt__" not in out:
            break
        pauses.append([i.value.get("status") for i in out["__interrupt__"]])
    ran = client.wait([call_id], timeout=60)[0]
    assert ran.status is CallStatus.SUCCEEDED and len(executions(r, call_id)) == 1
    assert pauses == [], (
        f"the call is {ran.status.value}, yet the graph paused again after each go-on: {pauses}"
    )
    assert out["out"] == "wiped prod"


def asks_after(client: Client) -> Any:
    """The node invokes the toolq tool, then asks its own question about the outcome."""
    [wipe] = toolq_tools(client, tools=["wipe"])

    def node(state: State, config: RunnableConfig) -> State:
        done = wipe.invoke({"target": "prod"}, config)
        note = interrupt(f"{done}: anything to add?")
        return {"out": f"{done} / {note}"}

    graph = StateGraph(State)
    graph.add_node("wipe", node)
    graph.add_edge(START, "wipe")
    graph.add_edge("wipe", END)
    return graph.compile(checkpointer=InMemorySaver())


def test_a_nodes_own_question_after_the_call_gets_its_own_answer(client, approvers, r):
    """On replay the tool finds its answer in the task's stored values and, the call decided,
    no longer calls ``interrupt()``: the node's next ``interrupt()`` takes index 0, the
    toolq answers value, so the node's question is never asked and the node reads the
    adapter's ``{"type": "toolq.answers", ...}`` as its person's answer."""
    approvers.start()
    graph = asks_after(client)
    config = {"configurable": {"thread_id": "lc-asks-after"}}
    out = graph.invoke({}, config)
    [parked] = out["__interrupt__"]
    call_id = parked.value["call_id"]
    approvers.approve_shown("alice", call_id)
    go_on = resume_command(out["__interrupt__"], {parked.value["tool_call_id"]: True})
    out = graph.invoke(go_on, config)
    assert "__interrupt__" in out, f"the node's question was never asked; it read {out}"
    [question] = out["__interrupt__"]
    assert question.value == "wiped prod: anything to add?"
    out = graph.invoke(Command(resume="all good"), config)
    assert "__interrupt__" not in out, [i.value for i in out["__interrupt__"]]
    assert out["out"] == "wiped prod / all good"
    assert len(executions(r, call_id)) == 1
