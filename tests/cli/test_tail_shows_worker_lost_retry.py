"""``toolq tail`` on the ``call.retrying`` event the sweeper emits for an idempotent call
whose worker was lost (runbook "A worker is killed mid-call").

That event carries ``{"status": "queued", "reason": "worker lost during execution;
re-running idempotent call"}``, not a handler retry's ``attempt``/``delay``/``error``.
Seen in a drill: ``toolq tail`` printed ``retrying  attempt None in Nones: null`` for it,
hiding the reason the runbook tells the operator to look for.
"""

from __future__ import annotations

from toolq.cli.render import what
from toolq.models import Event, EventType

REASON = "worker lost during execution; re-running idempotent call"


def test_tail_text_of_a_worker_lost_retry_names_the_reason() -> None:
    event = Event(
        id="1-0",
        type=EventType.RETRYING,
        run_id="run-1",
        call_id="c" * 32,
        data={"status": "queued", "reason": REASON},
    )
    text = what(event)
    assert "None" not in text and "null" not in text, text
    assert "worker lost" in text, text


def test_tail_text_of_a_handler_retry_is_unchanged() -> None:
    event = Event(
        id="1-0",
        type=EventType.RETRYING,
        run_id="run-1",
        call_id="c" * 32,
        data={"attempt": 2, "delay": 1.5, "error": "ConnectionError: boom"},
    )
    assert what(event) == "attempt 2 in 1.5s: ConnectionError: boom"
