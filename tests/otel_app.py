"""Tools for the tracing tests; with ``TOOLQ_TEST_SPANS_FILE`` set, finished spans go there.

A worker process loads this module as its app, so the environment variable gives it a
tracer provider whose exporter appends each finished span to the file as one JSON line
(synchronously: a span is on disk as soon as it ends, whatever happens to the process).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

from toolq import RiskLevel, ToolContext, ToolRegistry

registry = ToolRegistry()


class Transient(Exception):
    pass


@registry.tool()
def traced(text: str) -> str:
    """Open a span of the tool's own (it must join the caller's trace)."""
    from opentelemetry import trace

    with trace.get_tracer("tests.tool").start_as_current_span("tool.inner") as span:
        span.set_attribute("tool.text", text)
        return text.upper()


@registry.tool(retries=2, retry_on=(Transient,))
def shaky(failures: int, ctx: ToolContext) -> str:
    """Fail the first ``failures`` attempts."""
    if ctx.attempt <= failures:
        raise Transient(f"attempt {ctx.attempt} failed")
    return f"ok after {ctx.attempt}"


@registry.tool(risk=RiskLevel.DANGEROUS)
def guarded(target: str) -> str:
    """A call that waits for an approval."""
    return f"done {target}"


@registry.tool()
def broken() -> None:
    """Always fail."""
    raise RuntimeError("broken on purpose")


def _install(path: str) -> None:
    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import (
        SimpleSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )

    class JsonLines(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            lines = []
            for s in spans:
                ctx = s.get_span_context()
                assert ctx is not None
                lines.append(
                    json.dumps(
                        {
                            "name": s.name,
                            "trace_id": f"{ctx.trace_id:032x}",
                            "span_id": f"{ctx.span_id:016x}",
                            "parent_id": f"{s.parent.span_id:016x}" if s.parent else None,
                            "kind": s.kind.name,
                            "status": s.status.status_code.name,
                            "attributes": dict(s.attributes or {}),
                            "events": [
                                {"name": e.name, "attributes": dict(e.attributes or {})}
                                for e in s.events
                            ],
                            "pid": os.getpid(),
                        }
                    )
                )
            with open(path, "a") as f:
                f.write("".join(line + "\n" for line in lines))
            return SpanExportResult.SUCCESS

    provider = TracerProvider(resource=Resource.create({"service.name": "toolq-test-worker"}))
    provider.add_span_processor(SimpleSpanProcessor(JsonLines()))
    trace.set_tracer_provider(provider)


if os.environ.get("TOOLQ_TEST_SPANS_FILE"):
    _install(os.environ["TOOLQ_TEST_SPANS_FILE"])
