"""Call ids of a ``ToolqTool`` invoked without a ``ToolCall`` inside a LangGraph task.

Equal calls a task execution makes one after another are different calls ("how many equal
calls the task made before"). The count lives as long as the execution: a long-running node
in a busy process (other graphs' tasks making direct calls meanwhile) keeps it, or its next
equal call would get the id of its first one, which toolq answers with that earlier call
instead of running it.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from toolq.integrations import langchain


def scratchpad() -> Any:
    """What a LangGraph task execution's scratchpad holds that the ids depend on."""

    def get_null_resume(consume: bool = False) -> Any:  # a function made per execution
        return None

    return SimpleNamespace(resume=[], get_null_resume=get_null_resume)


def config(scratchpad: Any, ns: str) -> dict[str, Any]:
    return {"configurable": {"__pregel_scratchpad": scratchpad, "checkpoint_ns": ns}}


def test_equal_calls_of_a_live_task_keep_distinct_ids_while_other_tasks_run():
    live = scratchpad()  # a node still running (polling, looping)
    first = langchain._direct_call_id(config(live, "poll:task-1"), "echo", {"text": "status?"})
    second = langchain._direct_call_id(config(live, "poll:task-1"), "echo", {"text": "status?"})
    assert first != second
    others = [scratchpad() for _ in range(5000)]
    for i, pad in enumerate(others):  # other graphs' tasks in the same process meanwhile
        langchain._direct_call_id(config(pad, f"n:task-other-{i}"), "echo", {"text": "x"})
    third = langchain._direct_call_id(config(live, "poll:task-1"), "echo", {"text": "status?"})
    assert third not in (first, second), "the live task's third equal call reuses an earlier id"
    # the task's replay (a new execution of the same task) makes the same ids in the same order
    replay = scratchpad()
    again = [
        langchain._direct_call_id(config(replay, "poll:task-1"), "echo", {"text": "status?"})
        for _ in range(3)
    ]
    assert again == [first, second, third]
