"""toolq-only latencies: approval decision → execution start, and event delivery to a reader.

Both run against a live ``toolq worker`` on ``bench.peers.apps:registry`` through a ``Client``, and
compare wall-clock timestamps taken in different processes of this one machine.
"""

from __future__ import annotations

import statistics
import threading
import time
import uuid
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any, cast

from bench.figures import percentile
from toolq import Client
from toolq.models import CallStatus, Event, EventType

APPROVAL_WARMUP = 10
EVENT_WARMUP = 20
FINAL_EVENTS = frozenset({EventType.SUCCEEDED, EventType.FAILED, EventType.CANCELLED})


def summary(values_ms: list[float]) -> dict[str, float]:
    """Count, p50, p99, mean, min and max of a list of milliseconds."""
    return {
        "n": len(values_ms),
        "p50_ms": percentile(values_ms, 50),
        "p99_ms": percentile(values_ms, 99),
        "mean_ms": statistics.fmean(values_ms),
        "min_ms": min(values_ms),
        "max_ms": max(values_ms),
    }


# -- approval → start ------------------------------------------------------------------------


@dataclass
class ApprovalFigures:
    """Per approved call, milliseconds from just before ``approve()`` was called until ..."""

    returned_ms: list[float] = field(default_factory=list)
    """... ``approve()`` returned (decision written, call published, record read back)."""
    started_ms: list[float] = field(default_factory=list)
    """... the worker wrote ``call.started`` (the event's ``ts``, the worker's clock)."""
    seen_ms: list[float] = field(default_factory=list)
    """... a reader following the run (subscribed before the decision) had ``call.started``."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "approve_returned": summary(self.returned_ms),
            "decision_to_started": summary(self.started_ms),
            "decision_to_reader_has_started": summary(self.seen_ms),
        }


def approval_latency(client: Client, calls: int, timeout: float = 30.0) -> ApprovalFigures:
    """``calls`` gated calls, one at a time: dispatch, wait until parked, approve, run.

    The first ``APPROVAL_WARMUP`` calls are not counted.
    """
    figures = ApprovalFigures()
    for i in range(APPROVAL_WARMUP + calls):
        returned, started, seen = _approve_one(client, timeout)
        if i >= APPROVAL_WARMUP:
            figures.returned_ms.append(returned)
            figures.started_ms.append(started)
            figures.seen_ms.append(seen)
    return figures


def _approve_one(client: Client, timeout: float) -> tuple[float, float, float]:
    payload = [{"id": f"call_{uuid.uuid4().hex}", "name": "gated", "arguments": {}}]
    batch = client.dispatch(payload)
    [ref] = batch.calls
    if ref.status is not CallStatus.AWAITING_APPROVAL:
        raise RuntimeError(f"gated call was not parked for approval: {ref.status}")
    events = cast(Generator[Event], client.events(batch.run_id, follow=True, timeout=timeout))
    try:
        # Reading the parked event means the reader is subscribed before the decision.
        _next_of(events, ref.call_id, {EventType.AWAITING_APPROVAL})
        t0 = time.time()
        client.approvals.approve(ref.call_id, by="bench")
        returned = time.time()
        started = _next_of(events, ref.call_id, {EventType.STARTED})
        seen = time.time()
        final = _next_of(events, ref.call_id, FINAL_EVENTS)
    finally:
        events.close()
    if final.type is not EventType.SUCCEEDED:
        raise RuntimeError(f"approved call did not succeed: {final}")
    return (returned - t0) * 1000, (started.ts - t0) * 1000, (seen - t0) * 1000


def _next_of(
    events: Generator[Event], call_id: str, kinds: set[EventType] | frozenset[Any]
) -> Event:
    for event in events:
        if event.call_id == call_id and event.type in kinds:
            return event
    raise TimeoutError(f"no {sorted(kinds)} event for call {call_id}")


# -- event delivery --------------------------------------------------------------------------


@dataclass
class EventFigures:
    """Progress events of one ``ticker`` call, as a subscribed reader received them."""

    interval_s: float
    produced_ms: list[float] = field(default_factory=list)
    """Reader's arrival time minus the time the tool produced the value (``time.time()``)."""
    written_ms: list[float] = field(default_factory=list)
    """Reader's arrival time minus the event's ``ts`` (taken as the worker wrote it)."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "interval_s": self.interval_s,
            "produced_to_reader": summary(self.produced_ms),
            "written_to_reader": summary(self.written_ms),
        }


def event_latency(
    client: Client, count: int, interval: float, timeout: float = 60.0
) -> EventFigures:
    """One ``ticker`` call yielding ``count`` values ``interval`` s apart, read live.

    A reader thread follows the run with ``client.events(run_id, follow=True)``; the call is
    dispatched only once it blocks on the run's stream (``XREAD`` in ``CLIENT LIST``). The first
    ``EVENT_WARMUP`` events are not counted.
    """
    run_id = f"bench-events-{uuid.uuid4().hex}"
    arrivals = _Reader(client, run_id, timeout)
    arrivals.start()
    payload = [
        {
            "id": f"call_{uuid.uuid4().hex}",
            "name": "ticker",
            "arguments": {"count": EVENT_WARMUP + count, "interval": interval},
        }
    ]
    client.dispatch(payload, run_id=run_id)
    received = arrivals.join(timeout)
    figures = EventFigures(interval)
    progress = [(t, e) for t, e in received if e.type is EventType.PROGRESS]
    if len(progress) != EVENT_WARMUP + count:
        raise RuntimeError(f"reader got {len(progress)} of {EVENT_WARMUP + count} progress events")
    for arrived, event in progress[EVENT_WARMUP:]:
        figures.produced_ms.append((arrived - event.data["data"]["produced"]) * 1000)
        figures.written_ms.append((arrived - event.ts) * 1000)
    return figures


class _Reader:
    """A thread following one run's events until a final one; records arrival times."""

    def __init__(self, client: Client, run_id: str, timeout: float) -> None:
        self.client = client
        self.run_id = run_id
        self.timeout = timeout
        self.received: list[tuple[float, Event]] = []
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._read, daemon=True, name="bench-reader")

    def start(self) -> None:
        """Start reading; return once the reader blocks on the run's stream (``XREAD``)."""
        before = _blocked_readers(self.client)
        self.thread.start()
        deadline = time.monotonic() + 10
        while _blocked_readers(self.client) <= before:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError(f"event reader did not block on the stream: {self.error}")
            time.sleep(0.01)

    def join(self, timeout: float) -> list[tuple[float, Event]]:
        """Wait for the final event; (arrival time, event) in stream order."""
        self.thread.join(timeout)
        if self.thread.is_alive():
            raise TimeoutError(f"event reader still running after {timeout:g}s")
        if self.error is not None:
            raise RuntimeError(f"event reader failed: {self.error!r}") from self.error
        return self.received

    def _read(self) -> None:
        try:
            for event in self.client.events(self.run_id, follow=True, timeout=self.timeout):
                self.received.append((time.time(), event))
                if event.type in FINAL_EVENTS:
                    return
        except BaseException as exc:
            self.error = exc


def _blocked_readers(client: Client) -> int:
    """Connections blocked in ``XREAD`` now."""
    clients: Any = client.redis.client_list()
    return sum(1 for c in clients if c.get("cmd") == "xread" and "b" in c.get("flags", ""))
