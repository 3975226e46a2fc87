"""A LangGraph agent (``create_agent``) on a scripted fake chat model, with a file checkpointer.

The model calls ``echo`` and two ``wipe``s at once; once every call has a ToolMessage it
replies with what it read, as JSON ``{tool_call_id: [status, content]}``.

``python -m tests.integrations.lc_agent CHECKPOINT THREAD`` runs the agent until it is
interrupted for approval, saves the checkpointer to ``CHECKPOINT`` and exits.
"""

from __future__ import annotations

import json
import pickle
import sys
from collections import defaultdict
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langgraph.checkpoint.memory import InMemorySaver

from toolq import Client, Settings
from toolq.integrations.langchain import toolq_tools

FIRST_TURN = [
    {"name": "echo", "args": {"text": "hi"}, "id": "lc-echo", "type": "tool_call"},
    {"name": "wipe", "args": {"target": "prod"}, "id": "lc-wipe-1", "type": "tool_call"},
    {"name": "wipe", "args": {"target": "dev"}, "id": "lc-wipe-2", "type": "tool_call"},
]


class ScriptedChatModel(FakeMessagesListChatModel):
    """Answers from the conversation so far: the first turn's calls, then what it read."""

    responses: list[BaseMessage] = []
    first_turn: list[dict[str, Any]] = FIRST_TURN

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        read = {
            m.tool_call_id: [m.status, m.content] for m in messages if isinstance(m, ToolMessage)
        }
        if not read:
            message = AIMessage(content="", tool_calls=list(self.first_turn))
        else:
            message = AIMessage(content=json.dumps(read, sort_keys=True))
        return ChatResult(generations=[ChatGeneration(message=message)])


def make_agent(client: Client, saver: InMemorySaver, **kwargs: Any) -> Any:
    tools = toolq_tools(client, tools=["echo", "wipe", "slow"])
    return create_agent(ScriptedChatModel(**kwargs), tools, checkpointer=saver)


def save(saver: InMemorySaver, path: str) -> None:
    """Write the checkpointer's contents to ``path`` (a durable checkpointer, for the test)."""
    state = {
        "storage": {k: {ns: dict(v) for ns, v in d.items()} for k, d in saver.storage.items()},
        "writes": dict(saver.writes),
        "blobs": dict(saver.blobs),
    }
    with open(path, "wb") as f:
        pickle.dump(state, f)


def load(path: str) -> InMemorySaver:
    with open(path, "rb") as f:
        state = pickle.load(f)
    saver = InMemorySaver()
    for thread, namespaces in state["storage"].items():
        saver.storage[thread] = defaultdict(dict, namespaces)
    saver.writes.update(state["writes"])
    saver.blobs.update(state["blobs"])
    return saver


def first_half(path: str, thread: str) -> None:
    from tests.apps import registry

    with Client(registry, Settings()) as client:
        saver = InMemorySaver()
        agent = make_agent(client, saver)
        out = agent.invoke(
            {"messages": [("user", "wipe prod and dev")]},
            {"configurable": {"thread_id": thread}},
        )
        assert out.get("__interrupt__"), out
        save(saver, path)


if __name__ == "__main__":
    first_half(sys.argv[1], sys.argv[2])
