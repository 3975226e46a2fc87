"""What toolq's tracing hooks cost per call when nothing is traced: without OpenTelemetry,
and with the API alone (no tracer provider: the default).

Each mode runs in a fresh interpreter; the figure is the time of one dispatch hook plus one
worker hook (enter, report, exit), i.e. what tracing adds to one call end to end.

    python -m bench.probes.telemetry_overhead [--n 100000]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import sys, time, json
mode, n = sys.argv[1], int(sys.argv[2])
if mode == "absent":
    sys.modules["opentelemetry"] = None
from toolq import telemetry
from toolq.models import CallEnvelope, CallResult, CallStatus
env = CallEnvelope(call_id="c", run_id="r", tool_call_id="t", name="noop", arguments={})
result = CallResult(call_id="c", tool_call_id="t", name="noop", status=CallStatus.SUCCEEDED)

def once():
    with telemetry.dispatch_span("agent") as span:
        if span.traceparent:
            env.traceparent, env.tracestate = span.traceparent, span.tracestate
        span.dispatched("r", [])
    with telemetry.call_span(env, 1) as call:
        if call.recording:
            pass
        call.finish(result)

for _ in range(1000):
    once()
start = time.perf_counter()
for _ in range(n):
    once()
print(json.dumps({"mode": mode, "us_per_call": (time.perf_counter() - start) / n * 1e6}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=100_000)
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}, {args.n} calls per mode")
    for mode in ("absent", "api-only"):
        out = subprocess.run(
            [sys.executable, "-c", PROBE, mode, str(args.n)],
            cwd=ROOT,
            env={"PYTHONPATH": str(ROOT)},
            capture_output=True,
            text=True,
            check=True,
        )
        figure = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"  {mode:9s} {figure['us_per_call']:8.2f} µs per call (dispatch + worker hooks)")


if __name__ == "__main__":
    main()
