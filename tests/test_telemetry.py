"""OpenTelemetry across real worker processes: one trace from the agent to the tool's spans.

The test process traces with the SDK's ``InMemorySpanExporter``; the workers load
``tests.otel_app``, whose exporter writes their finished spans to a JSON-lines file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.conftest import ROOT, SECRETS_KEY
from tests.otel_app import registry
from toolq import CallStatus, Client
from toolq.settings import Settings

pytestmark = pytest.mark.e2e

_EXPORTER = InMemorySpanExporter()


@pytest.fixture
def memory() -> Iterator[InMemorySpanExporter]:
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    if not getattr(provider, "_toolq_test_exporter", False):
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        provider._toolq_test_exporter = True  # type: ignore[attr-defined]
    _EXPORTER.clear()
    yield _EXPORTER
    _EXPORTER.clear()


@pytest.fixture
def traced_workers(workers, tmp_path: Path) -> Path:
    spans = tmp_path / "spans.jsonl"
    workers.start(TOOLQ_APP="tests.otel_app:registry", TOOLQ_TEST_SPANS_FILE=str(spans))
    return spans


@pytest.fixture
def otel_client(settings: Settings) -> Iterator[Client]:
    with Client(registry, settings) as c:
        yield c


def worker_spans(path: Path, wanted: int, timeout: float = 10) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while True:
        text = path.read_text() if path.exists() else ""
        spans = [json.loads(line) for line in text.splitlines()]
        if len(spans) >= wanted or time.monotonic() > deadline:
            return spans
        time.sleep(0.05)


def one(spans: list[dict[str, Any]], name: str, **attributes: Any) -> dict[str, Any]:
    found = [
        s
        for s in spans
        if s["name"] == name and all(s["attributes"].get(k) == v for k, v in attributes.items())
    ]
    assert len(found) == 1, (name, attributes, spans)
    return found[0]


def call(call_id: str, name: str, **arguments: object) -> dict[str, object]:
    return {"id": call_id, "name": name, "arguments": arguments}


def test_worker_spans_join_the_agents_trace(memory, traced_workers, otel_client, r):
    tracer = trace.get_tracer("tests.agent")
    with tracer.start_as_current_span("agent.turn") as agent:
        batch = otel_client.dispatch(
            [
                call("t1", "traced", text="hi"),
                call("t2", "shaky", failures=1),
                call("t3", "broken"),
            ],
            principal="agent",
        )
    results = batch.wait(timeout=30)
    assert [res.status for res in results] == [
        CallStatus.SUCCEEDED,
        CallStatus.SUCCEEDED,
        CallStatus.FAILED,
    ]
    trace_id = f"{agent.get_span_context().trace_id:032x}"

    (dispatch,) = [s for s in memory.get_finished_spans() if s.name == "toolq.dispatch"]
    assert dispatch.parent is not None
    assert dispatch.parent.span_id == agent.get_span_context().span_id
    assert dispatch.kind is trace.SpanKind.PRODUCER
    assert dispatch.attributes["toolq.run_id"] == batch.run_id
    assert [e.attributes["toolq.call_id"] for e in dispatch.events] == batch.call_ids
    dispatch_id = f"{dispatch.get_span_context().span_id:016x}"

    # The trace context rides in the envelope, beside the arguments (which approvals sign).
    envelope = json.loads(r.hget(f"toolq:call:{batch.call_ids[0]}", "envelope"))
    assert envelope["traceparent"].startswith(f"00-{trace_id}-{dispatch_id}-")
    assert envelope["arguments"] == {"text": "hi"}

    spans = worker_spans(traced_workers, 4)
    assert {s["pid"] for s in spans}.isdisjoint({os.getpid()})
    executed = one(spans, "toolq.execute traced")
    assert executed["trace_id"] == trace_id and executed["parent_id"] == dispatch_id
    assert executed["kind"] == "CONSUMER" and executed["status"] == "UNSET"
    assert executed["attributes"] == executed["attributes"] | {
        "toolq.tool": "traced",
        "toolq.risk": "safe",
        "toolq.call_id": batch.call_ids[0],
        "toolq.run_id": batch.run_id,
        "toolq.tool_call_id": "t1",
        "toolq.status": "succeeded",
    }
    inner = one(spans, "tool.inner")
    assert inner["trace_id"] == trace_id and inner["parent_id"] == executed["span_id"]
    assert inner["attributes"] == {"tool.text": "hi"}

    shaky = one(spans, "toolq.execute shaky")
    assert shaky["parent_id"] == dispatch_id
    assert shaky["attributes"]["toolq.attempts"] == 2
    (retry,) = shaky["events"]
    assert retry["name"] == "toolq.retry"
    assert retry["attributes"]["toolq.attempt"] == 2
    assert "attempt 1 failed" in retry["attributes"]["toolq.error"]

    broken = one(spans, "toolq.execute broken")
    assert broken["status"] == "ERROR"
    assert broken["attributes"]["toolq.status"] == "failed"
    assert broken["attributes"]["toolq.error_type"] == "RuntimeError"


def test_approval_wait_is_an_event_of_the_call_span(memory, traced_workers, otel_client):
    with trace.get_tracer("tests.agent").start_as_current_span("agent.turn") as agent:
        batch = otel_client.dispatch([call("g1", "guarded", target="db")], principal="agent")
    assert batch.calls[0].status is CallStatus.AWAITING_APPROVAL
    time.sleep(0.5)
    otel_client.approvals.approve(batch.call_ids[0], by="alice")
    assert batch.wait(timeout=30)[0].status is CallStatus.SUCCEEDED
    executed = one(worker_spans(traced_workers, 1), "toolq.execute guarded")
    assert executed["trace_id"] == f"{agent.get_span_context().trace_id:032x}"
    assert executed["attributes"]["toolq.risk"] == "dangerous"
    (waited,) = [e for e in executed["events"] if e["name"] == "toolq.approval_wait"]
    assert waited["attributes"]["toolq.by"] == "alice"
    assert 0.5 <= waited["attributes"]["toolq.wait_s"] < 20
    (dispatch,) = [s for s in memory.get_finished_spans() if s.name == "toolq.dispatch"]
    assert dispatch.events[0].attributes["toolq.status"] == "awaiting_approval"


def test_a_call_dispatched_untraced_runs_in_a_trace_of_its_own(traced_workers, otel_client):
    # The test process has no provider before the `memory` fixture runs in another test;
    # a context-free envelope is what any untraced dispatcher stores.
    batch = otel_client.dispatch([call("u1", "traced", text="x")], principal="agent")
    assert batch.wait(timeout=30)[0].status is CallStatus.SUCCEEDED
    spans = worker_spans(traced_workers, 2)
    executed = one(spans, "toolq.execute traced")
    inner = one(spans, "tool.inner")
    assert inner["parent_id"] == executed["span_id"]
    assert inner["trace_id"] == executed["trace_id"]


UNTRACED = textwrap.dedent(
    """
    import json, sys
    if sys.argv[1] == "blocked":
        sys.modules["opentelemetry"] = None  # as if opentelemetry-api were not installed
    from tests.otel_app import registry
    from toolq import Client, Settings
    from toolq import telemetry
    with Client(registry, Settings()) as client:
        batch = client.dispatch([{"id": "c", "name": "traced", "arguments": {"text": "x"}}])
        raw = client.store.redis.hget("toolq:call:" + batch.call_ids[0], "envelope")
    env = json.loads(raw)
    print(json.dumps({"available": telemetry.available(), "traceparent": env["traceparent"]}))
    """
)


@pytest.mark.parametrize("mode", ["blocked", "no-provider"])
def test_without_opentelemetry_or_a_provider_nothing_is_traced(mode, settings):
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "TOOLQ_REDIS_URL": settings.redis_url,
        "TOOLQ_SECRETS_KEY": SECRETS_KEY,
    }
    env.pop("TOOLQ_TEST_SPANS_FILE", None)
    out = subprocess.run(
        [sys.executable, "-c", UNTRACED, mode],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["traceparent"] is None
    assert report["available"] is (mode != "blocked")
