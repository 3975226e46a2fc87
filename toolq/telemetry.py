"""OpenTelemetry tracing, used only when ``opentelemetry-api`` is installed.

``dispatch`` runs in a ``toolq.dispatch`` span and stores the W3C trace context
(``traceparent``/``tracestate``) in each call's envelope, beside the arguments and never in
them (approvals sign a digest of the arguments). The worker runs the handler inside a
``toolq.execute <tool>`` span, a child of that context, so a tool's own spans join the
agent's trace. Spans go wherever the process's tracer provider sends them; toolq configures
no exporter.

Without the package every function here returns a shared no-op, after one failed import.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from toolq.models import CallStatus

if TYPE_CHECKING:
    from opentelemetry.trace import Span

    from toolq.models import CallEnvelope, CallResult, CallStatus

TRACER_NAME = "toolq"


class DispatchedCall(Protocol):
    """What a dispatch span records of each call (``toolq.dispatch.CallRef`` has it)."""

    @property
    def call_id(self) -> str: ...  # noqa: D102

    @property
    def name(self) -> str: ...  # noqa: D102

    @property
    def status(self) -> CallStatus: ...  # noqa: D102

    @property
    def duplicate(self) -> bool: ...  # noqa: D102


_api: Any = None
"""``(trace, propagate)`` once imported, ``False`` when not installed, ``None`` before."""


def _otel() -> Any:
    global _api
    if _api is None:
        try:
            from opentelemetry import propagate, trace
        except ImportError:
            _api = False
        else:
            _api = (trace, propagate)
    return _api


def available() -> bool:
    """True when ``opentelemetry-api`` can be imported."""
    return bool(_otel())


def _tracing() -> Any:
    """The API modules when spans can be recorded: installed, and a tracer provider set."""
    api = _otel()
    if not api:
        return None
    trace = api[0]
    # Until an SDK sets a provider, every span would be a non-recording no-op: skip them all.
    if isinstance(
        trace.get_tracer_provider(), trace.ProxyTracerProvider | trace.NoOpTracerProvider
    ):
        return None
    return api


class DispatchSpan:
    """The trace context a dispatch hands to each of its calls, and what it reports."""

    def __init__(self, span: Span | None = None, carrier: dict[str, str] | None = None) -> None:
        self.span = span
        self.carrier = carrier or {}

    @property
    def traceparent(self) -> str | None:
        """W3C ``traceparent`` of the dispatch span, if it is being traced."""
        return self.carrier.get("traceparent")

    @property
    def tracestate(self) -> str | None:
        """W3C ``tracestate`` of the dispatch span, if any."""
        return self.carrier.get("tracestate")

    def dispatched(self, run_id: str, calls: Sequence[DispatchedCall]) -> None:
        """Record the run and one event per call (id, tool, status) on the dispatch span."""
        if self.span is None:
            return
        self.span.set_attribute("toolq.run_id", run_id)
        self.span.set_attribute("toolq.calls", len(calls))
        for ref in calls:
            self.span.add_event(
                "toolq.call",
                {
                    "toolq.call_id": ref.call_id,
                    "toolq.tool": ref.name,
                    "toolq.status": ref.status.value,
                    "toolq.duplicate": ref.duplicate,
                },
            )


_NO_DISPATCH = DispatchSpan()


def dispatch_span(principal: str | None) -> contextlib.AbstractContextManager[DispatchSpan]:
    """A producer span around one dispatch; no-op without OpenTelemetry or a recording span."""
    api = _tracing()
    if api is None:
        return contextlib.nullcontext(_NO_DISPATCH)
    return _dispatch_span(api, principal)


@contextlib.contextmanager
def _dispatch_span(api: Any, principal: str | None) -> Iterator[DispatchSpan]:
    trace, propagate = api
    tracer = trace.get_tracer(TRACER_NAME)
    with tracer.start_as_current_span("toolq.dispatch", kind=trace.SpanKind.PRODUCER) as span:
        if not span.is_recording():
            yield _NO_DISPATCH
            return
        if principal:
            span.set_attribute("toolq.principal", principal)
        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        yield DispatchSpan(span, carrier)


class CallSpan:
    """The worker's span of one call: attributes, retry and approval-wait events, status."""

    def __init__(self, span: Span | None = None) -> None:
        self.span = span

    @property
    def recording(self) -> bool:
        """True when anything set on this span is kept."""
        return self.span is not None

    def retry(self, attempt: int, delay: float, error: str) -> None:
        """An event for a retry about to happen."""
        if self.span is not None:
            self.span.add_event(
                "toolq.retry",
                {"toolq.attempt": attempt, "toolq.delay_s": delay, "toolq.error": error},
            )

    def approval_wait(self, parked_at: float, decided_at: float, by: str) -> None:
        """An event (timestamped at the decision) for the time the call waited for a human."""
        if self.span is not None:
            self.span.add_event(
                "toolq.approval_wait",
                {"toolq.wait_s": round(max(0.0, decided_at - parked_at), 3), "toolq.by": by},
                timestamp=int(decided_at * 1e9),
            )

    def finish(self, result: CallResult) -> None:
        """Set the call's final status (and the span's error status on failure)."""
        if self.span is None:
            return
        self.span.set_attribute("toolq.status", result.status.value)
        self.span.set_attribute("toolq.attempts", result.attempts)
        if result.error_type:
            self.span.set_attribute("toolq.error_type", result.error_type)
        if result.status is not CallStatus.SUCCEEDED:
            from opentelemetry.trace import Status, StatusCode

            self.span.set_status(Status(StatusCode.ERROR, result.error or result.status.value))


_NO_CALL = CallSpan()


def carrier_of(envelope: CallEnvelope) -> dict[str, str]:
    """The W3C trace context a call was dispatched with (empty if none)."""
    carrier = {}
    if envelope.traceparent:
        carrier["traceparent"] = envelope.traceparent
        if envelope.tracestate:
            carrier["tracestate"] = envelope.tracestate
    return carrier


def call_span(
    envelope: CallEnvelope, execution: int
) -> contextlib.AbstractContextManager[CallSpan]:
    """A consumer span, current while the handler runs, child of the dispatch's context.

    A call dispatched without trace context starts a trace of its own (when a tracer
    provider is configured at all).
    """
    api = _tracing()
    if api is None:
        return contextlib.nullcontext(_NO_CALL)
    return _call_span(api, envelope, execution)


@contextlib.contextmanager
def _call_span(api: Any, envelope: CallEnvelope, execution: int) -> Iterator[CallSpan]:
    trace, propagate = api
    carrier = carrier_of(envelope)
    parent = propagate.extract(carrier) if carrier else None
    tracer = trace.get_tracer(TRACER_NAME)
    with tracer.start_as_current_span(
        f"toolq.execute {envelope.name}",
        context=parent,
        kind=trace.SpanKind.CONSUMER,
        record_exception=False,
        set_status_on_exception=True,
    ) as span:
        if not span.is_recording():
            yield _NO_CALL
            return
        span.set_attributes(
            {
                "toolq.tool": envelope.name,
                "toolq.risk": envelope.risk.value,
                "toolq.call_id": envelope.call_id,
                "toolq.run_id": envelope.run_id,
                "toolq.tool_call_id": envelope.tool_call_id,
                "toolq.execution": execution,
                "toolq.since_dispatch_s": round(max(0.0, time.time() - envelope.created_at), 3),
            }
        )
        yield CallSpan(span)
