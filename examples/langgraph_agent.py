"""LangGraph on toolq: a parked call interrupts the graph; a person decides; it resumes.

See ``examples/frameworks_tools.py`` for how to start the stack and what to export.
"""

from __future__ import annotations

from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage
from langgraph.checkpoint.memory import InMemorySaver

from examples.frameworks_tools import person, registry
from toolq import Client, Settings
from toolq.integrations.langchain import approval_requests, resume_command, toolq_tools


class Model(FakeMessagesListChatModel):
    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self


def main() -> None:
    calls = [
        {"name": "lookup", "args": {"user": "ann"}, "id": "c1", "type": "tool_call"},
        {"name": "delete_user", "args": {"user": "ann"}, "id": "c2", "type": "tool_call"},
    ]
    model = Model(responses=[AIMessage(content="", tool_calls=calls), AIMessage(content="ok")])
    with Client(registry, Settings()) as client:  # the agent: Redis credentials only
        agent = create_agent(model, toolq_tools(client), checkpointer=InMemorySaver())
        config = {"configurable": {"thread_id": "example-thread"}}
        out = agent.invoke({"messages": [("user", "remove ann")]}, config)
        pending = approval_requests(out["__interrupt__"])
        print("parked:", list(pending))
        # The person denies over HTTP with their own token; the model will read why.
        with person() as approver:
            for interrupt in pending.values():
                approver.deny(interrupt.value["call_id"], "ann is a customer")
        # True only answers the interrupt: the tool reads the decision toolq holds.
        done = agent.invoke(
            resume_command(out["__interrupt__"], dict.fromkeys(pending, True)), config
        )
        for message in done["messages"]:
            print(type(message).__name__, message.content)


if __name__ == "__main__":
    main()
