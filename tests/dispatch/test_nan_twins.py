"""NaN and Infinity are no JSON numbers on every path a call comes in by, not only the
HTTP body: ``Client.dispatch`` of Python data (what the MCP server hands it, parsed by the
MCP SDK, which takes ``NaN``; what ``dispatch_stream`` and the adapters build) is refused as
the API refuses the same call in its body (400), with nothing written. Let through, the
call was stored with ``null`` in the number's place: an approver read ``"seconds": null``."""

from __future__ import annotations

import math

import pytest

from toolq.errors import PayloadError

CONSTANTS = [math.nan, math.inf, -math.inf]


def _calls(constant: float) -> list[dict]:
    return [{"id": "c1", "name": "gated", "arguments": {"path": "/x", "seconds": constant}}]


@pytest.mark.parametrize("constant", CONSTANTS)
def test_client_dispatch_refuses_nan_and_infinity_as_the_api_does(client, r, constant):
    before = r.dbsize()
    with pytest.raises(PayloadError):
        client.dispatch(_calls(constant), run_id="run-nan-python", principal="agent")
    assert r.dbsize() == before


def test_nan_in_a_streamed_anthropic_call_fails_that_call_as_in_a_chat_stream(client, r):
    # A chat stream's arguments text with NaN is a failed call ("not valid JSON"); the same
    # text streamed as an Anthropic tool_use input was parsed with NaN taken, then queued
    # with null in its place.
    from anthropic.types import RawMessageStopEvent

    from tests.dispatch.test_dispatch_stream import anthropic_call

    events = [
        *anthropic_call(0, "t1", "gated", ['{"path": "/x", "seconds": NaN}']),
        RawMessageStopEvent(type="message_stop"),
    ]
    [batch] = client.dispatch_stream(events, run_id="run-nan-stream", principal="agent")
    [result] = batch.results()
    assert result.status.value == "failed", result
    assert "NaN" in (result.error or ""), result
