"""Calls and events as people read them: one short line each, coloured on a terminal."""

from __future__ import annotations

import json
import time
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from toolq.approvals.models import visible as visible  # re-exported for the CLI
from toolq.models import CallStatus, Event, EventType

SHORT_ID = 8
"""Characters of a call id shown in a line (the dashboard shows as many)."""
SHORT_RUN = 16
"""A longer run id is cut to ``SHORT_ID`` characters and an ellipsis."""
TEXT_CHARS = 80
"""A line's free text (arguments, output, error) is cut to this many characters."""
_SHOWN_ELSEWHERE = {"status", "name", "tool_call_id", "position", "tenant", "complete"}

STATUS_STYLE = {
    CallStatus.QUEUED: "cyan",
    CallStatus.AWAITING_APPROVAL: "yellow",
    CallStatus.RUNNING: "blue",
    CallStatus.SUCCEEDED: "green",
    CallStatus.FAILED: "red",
    CallStatus.DENIED: "red",
    CallStatus.EXPIRED: "red",
    CallStatus.CANCELLED: "magenta",
    CallStatus.UNKNOWN: "bold yellow",
}
EVENT_STYLE = {
    EventType.QUEUED: "cyan",
    EventType.AWAITING_APPROVAL: "yellow",
    EventType.APPROVED: "green",
    EventType.DENIED: "red",
    EventType.EXPIRED: "red",
    EventType.STARTED: "blue",
    EventType.PROGRESS: "blue",
    EventType.RETRYING: "yellow",
    EventType.THROTTLED: "yellow",
    EventType.SUCCEEDED: "bold green",
    EventType.FAILED: "bold red",
    EventType.CANCELLED: "magenta",
    EventType.PREVIEWED: "cyan",
    EventType.UNDONE: "magenta",
    EventType.UNDO_FAILED: "red",
    EventType.UNKNOWN: "bold yellow",
}


def clock(ts: float | None) -> str:
    """Local wall time with milliseconds, ``-`` for none."""
    if ts is None:
        return "-"
    return time.strftime("%H:%M:%S", time.localtime(ts)) + f".{int(ts * 1000) % 1000:03d}"


def when(ts: float | None) -> str:
    """Local date and time to the second, ``-`` for none."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts)) if ts else "-"


def short(value: str, chars: int = SHORT_ID) -> str:
    """The first ``chars`` characters of an id."""
    return value[:chars]


def short_run(run_id: str) -> str:
    """A run id as a line shows it: whole when short, else its start and an ellipsis."""
    return run_id if len(run_id) <= SHORT_RUN else run_id[:SHORT_ID] + "…"


def cut(value: Any, chars: int = TEXT_CHARS) -> str:
    """``value`` as compact text (JSON unless a string) on one line, at most ``chars`` long."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    text = " ".join(text.split())
    return text if len(text) <= chars else text[: chars - 1] + "…"


def duration(ms: float | None) -> str:
    """A call's duration: ``-``, ``850ms``, ``12.3s`` or ``4m05s``."""
    if ms is None:
        return "-"
    if ms < 1000:
        return f"{ms:.0f}ms"
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.1f}s"
    return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"


def status_text(status: CallStatus | str) -> Text:
    """A call status in its colour."""
    value = CallStatus(status)
    return Text(value.value, style=STATUS_STYLE.get(value, ""))


def step(event: Event) -> str:
    """The event's type without the ``call.`` prefix (``awaiting_approval``, ``progress``)."""
    return event.type.value.removeprefix("call.")


def what(event: Event) -> str:
    """The short free text of an event: who decided, the output, the error, the progress."""
    data = event.data
    kind = event.type
    if kind is EventType.QUEUED:
        return f"{data.get('risk', '')} {cut(data.get('arguments', {}))}".strip()
    if kind is EventType.AWAITING_APPROVAL:
        return f"{data.get('risk', '')} until {clock(data.get('deadline'))}"
    if kind is EventType.APPROVED:
        decision = data.get("decision", "approved")
        return f"by {data.get('by', '-')}" + ("" if decision == "approved" else f" ({decision})")
    if kind is EventType.DENIED and data.get("by"):
        reason = data.get("reason")
        return f"by {data['by']}" + (f": {cut(reason)}" if reason else "")
    if kind is EventType.STARTED:
        return f"attempt {data.get('attempt', 1)}"
    if kind is EventType.PROGRESS:
        return cut(data.get("data"))
    if kind is EventType.RETRYING and "attempt" not in data:  # re-queued by the sweeper
        return cut(data.get("reason") or data.get("error") or "")
    if kind is EventType.RETRYING:
        return f"attempt {data.get('attempt')} in {data.get('delay')}s: {cut(data.get('error'))}"
    if kind is EventType.SUCCEEDED:
        return f"{duration(data.get('duration_ms'))} {cut(data.get('output'))}"
    if data.get("error"):
        return cut(error_text(data.get("error_type"), str(data["error"])))
    rest = {k: v for k, v in data.items() if k not in _SHOWN_ELSEWHERE}
    return cut(rest) if rest else ""


def error_text(error_type: str | None, error: str) -> str:
    """``type: message``, unless the message already starts with its type."""
    if not error_type or error.startswith(error_type):
        return error
    return f"{error_type}: {error}"


def print_table(table: Table, width: int = 200) -> None:
    """Print ``table`` at least ``width`` wide, never folded (full ids), no trailing blanks."""
    wide = Console(width=max(Console().width, width), soft_wrap=True, highlight=False)
    with wide.capture() as captured:
        wide.print(table)
    for line in captured.get().splitlines():
        wide.out(line.rstrip(), highlight=False)


def event_line(event: Event, tool: str) -> Text:
    """One line: time, run, short call id, tool, step, short text."""
    line = Text()
    line.append(clock(event.ts), style="dim")
    line.append(f"  {short_run(event.run_id)}  ")
    line.append(short(event.call_id), style="bold")
    line.append(f"  {tool}  ")
    line.append(step(event), style=EVENT_STYLE.get(event.type, ""))
    text = what(event)
    if text:
        line.append(f"  {text}")
    return line
