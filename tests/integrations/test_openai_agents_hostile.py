"""OpenAI Agents SDK adapter under hostile model output and interrupted resumes.

The agent's side is the suite's plain ``client`` (Redis credentials only); the people's side
is the real HTTP API and verifying workers (``Approvers``). Each test drives the SDK the way
the docs show (``Runner.run``, ``first.interruptions``, ``tools.call_for``, ``state.approve``,
``tools.reject``) with a scripted ``Model`` that sends the raw ``arguments`` text it is given.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from agents import Agent, Runner, RunState
from agents.items import ModelResponse
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from tests.integrations.support import executions
from toolq import CallStatus
from toolq.integrations.openai_agents import ToolqAgentTools

pytestmark = pytest.mark.e2e


class RawArgumentsModel(Model):
    """Calls ``(call_id, tool, raw arguments text)`` at once, then answers with every output
    it read as JSON ``{call_id: output}``."""

    def __init__(self, calls: list[tuple[str, str, str]]) -> None:
        self.calls = calls

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        items = input if isinstance(input, list) else []
        read = {
            item["call_id"]: item["output"]
            for item in items
            if isinstance(item, dict) and item.get("type") == "function_call_output"
        }
        if not read:
            output: list[Any] = [
                ResponseFunctionToolCall(
                    type="function_call", call_id=cid, name=name, arguments=raw, id=f"fc_{cid}"
                )
                for cid, name, raw in self.calls
            ]
        else:
            text = ResponseOutputText(
                type="output_text", text=json.dumps(read, sort_keys=True), annotations=[]
            )
            output = [
                ResponseOutputMessage(
                    type="message", id="m", role="assistant", status="completed", content=[text]
                )
            ]
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


def agent_for(tools: ToolqAgentTools, calls: list[tuple[str, str, str]]) -> Agent[Any]:
    return Agent(name="ops", model=RawArgumentsModel(calls), tools=list(tools.tools))


TRUNCATED = '{"target": "prod"'  # a model's arguments cut off mid-object


def test_truncated_arguments_json_reaches_the_model_as_an_error_not_a_crash(client, approvers):
    """A model sends arguments that are not valid JSON (a truncated object: common with
    ``max_tokens`` or a flaky provider). The SDK cannot hand them to ``needs_approval``, so it
    makes the call an interruption without asking the adapter. The docs' loop then asks
    ``tools.call_for(item)`` for the toolq call to decide, and resumes with
    ``state.approve(item)`` (or ``tools.reject``). The adapter's ``json.loads`` raises a bare
    ``JSONDecodeError`` from ``call_for`` and ``reject``, and from the tool itself on resume,
    which the SDK turns into ``UserError``: the whole run dies, and the well-formed ``echo``
    beside it never reaches the model. Expected: no toolq call exists (``call_for`` says None),
    the rejection works, and an approved resume lets the model read an error for the bad
    call and go on."""
    approvers.start()
    tools = ToolqAgentTools(client, run_id="oa-truncated", tools=["echo", "wipe"])
    agent = agent_for(tools, [("t-w", "wipe", TRUNCATED), ("t-e", "echo", '{"text": "hi"}')])

    async def scenario() -> dict[str, Any]:
        first = await Runner.run(agent, "wipe prod")
        [item] = first.interruptions  # the SDK's own interruption: nothing was dispatched
        state = first.to_state()
        problems = []
        try:
            assert tools.call_for(item) is None
        except json.JSONDecodeError as exc:
            problems.append(f"call_for raised {exc!r}")
        state.approve(item)  # nothing for a person to decide in toolq: let the tool answer
        try:
            second = await Runner.run(agent, state)
        except Exception as exc:  # what the app sees
            problems.append(f"the resumed run raised {exc!r}")
            return {"problems": problems, "read": None}
        return {"problems": problems, "read": json.loads(str(second.final_output))}

    got = asyncio.run(scenario())
    assert got["problems"] == [], got["problems"]
    read = got["read"]
    assert json.loads(read["t-e"]) == {"text": "hi"}
    assert "json" in read["t-w"].lower() and "wiped" not in read["t-w"]
    assert [(res.tool_call_id, res.status) for res in client.results("oa-truncated")
            if res.name == "wipe"] in ([], [("t-w", CallStatus.FAILED)])  # fmt: skip


def test_rejecting_a_call_with_truncated_arguments_does_not_raise(client, approvers):
    """``tools.reject(state, item, why)`` for that same interruption raises the bare
    ``JSONDecodeError`` too, before ``state.reject`` is reached: the app cannot even say no
    to a call that was never dispatched."""
    approvers.start()
    tools = ToolqAgentTools(client, run_id="oa-truncated-reject", tools=["wipe"])
    agent = agent_for(tools, [("t-w", "wipe", TRUNCATED)])

    async def scenario() -> str:
        first = await Runner.run(agent, "wipe prod")
        [item] = first.interruptions
        state = first.to_state()
        tools.reject(state, item, "your arguments were cut off")
        return str((await Runner.run(agent, state)).final_output)

    read = json.loads(asyncio.run(scenario()))
    assert "your arguments were cut off" in read["t-w"]
    assert client.results("oa-truncated-reject") == []


BIG = "x" * (6 * 1024 * 1024)  # past TOOLQ_MAX_PAYLOAD_BYTES (5 MiB)


@pytest.mark.parametrize("tool", ["wipe", "echo"])  # needs_approval's dispatch; the tool's own
def test_an_oversized_call_is_an_error_the_model_reads_not_a_crash_of_the_run(
    client, approvers, tool
):
    """toolq refuses a call over ``max_payload_bytes`` with ``PayloadError``. The adapter
    lets it escape from ``needs_approval`` (a gated tool) or from the tool (an ungated one):
    the SDK turns it into ``UserError`` and the run dies, and the well-formed ``echo`` of the
    same turn is lost with it. Expected (as for invalid arguments, which the model reads as
    ``Error: invalid arguments ...``): the model reads toolq's refusal for that call, the
    other call runs, the run goes on, and nothing of the refused call is stored."""
    approvers.start()
    run_id = f"oa-big-{tool}"
    tools = ToolqAgentTools(client, run_id=run_id, tools=["echo", "wipe"])
    key = "target" if tool == "wipe" else "text"
    calls = [("b-big", tool, json.dumps({key: BIG})), ("b-ok", "echo", '{"text": "ok"}')]
    agent = agent_for(tools, calls)

    async def scenario() -> Any:
        try:
            return json.loads(str((await Runner.run(agent, "go")).final_output))
        except Exception as exc:  # what the app sees
            return f"the run raised {exc!r}"[:300]

    read = asyncio.run(scenario())
    assert isinstance(read, dict), read
    assert "payload" in read["b-big"] and BIG not in read["b-big"]
    assert json.loads(read["b-ok"]) == {"text": "ok"}
    assert [res.tool_call_id for res in client.results(run_id)] == ["b-ok"]


def test_cancelling_a_resume_that_waits_on_a_person_leaves_the_call_parked(client, approvers, r):
    """The docs: after ``state.approve(item)`` "the OpenAI Agents tool waits until the call is
    decided", and only ``tools.reject`` withdraws a call (a plain ``state.reject`` leaves it
    parked). Yet the wait runs under ``cancelled_with_task``: when the waiting run is
    cancelled (Ctrl-C, a graceful restart of the agent service, an ``asyncio.wait_for``
    around it, a web request whose client went away), the adapter cancels the parked call
    itself. Nobody decided; the approver about to approve gets ``NotAwaitingApprovalError``;
    the next resume from the saved ``RunState`` reads "cancelled" for a call that was never
    refused. (A ``kill -9`` of the same process leaves the call parked and the next resume
    runs it once: only the polite stop loses it.) Expected: a cancelled wait leaves the
    call as it was for the next resume to find."""
    approvers.start()
    tools = ToolqAgentTools(client, run_id="oa-wait-cancel", tools=["wipe"])
    agent = agent_for(tools, [("c-w", "wipe", '{"target": "prod"}')])

    async def scenario() -> tuple[str, str, str]:
        first = await Runner.run(agent, "wipe prod")
        [item] = first.interruptions
        call_id = tools.call_for(item)
        saved = first.to_state().to_string()  # what the app persists at the interruption
        state = first.to_state()
        state.approve(item)
        task = asyncio.create_task(Runner.run(agent, state))
        await asyncio.sleep(1.0)  # the resumed run waits on alice
        assert not task.done()
        task.cancel()  # the agent service restarts
        with pytest.raises(asyncio.CancelledError):
            await task
        after_cancel = client.result(call_id).status.value
        if after_cancel != "awaiting_approval":
            return call_id, after_cancel, ""
        # later: alice approves, and the restarted service resumes the saved state
        await asyncio.to_thread(approvers.approve_shown, "alice", call_id)
        again = await RunState.from_string(agent, saved)
        [again_item] = again.get_interruptions()
        again.approve(again_item)
        done = await asyncio.wait_for(Runner.run(agent, again), 60)
        return call_id, after_cancel, str(done.final_output)

    call_id, after_cancel, output = asyncio.run(scenario())
    assert after_cancel == "awaiting_approval", (
        f"cancelling the waiting run left the parked call {after_cancel}"
    )
    assert json.loads(output) == {"c-w": "wiped prod"}
    assert len(executions(r, call_id)) == 1
