"""A turn's calls side by side: the turn time of one conversation whose turns ask for a few
short synchronous calls (one shared message), on one worker.

    python -m bench.probes.turn_spread [--turns 20] [--calls 2,3] [--seconds 0.002,0.02]

On a private Redis, one ``toolq worker`` (``--pool threads -c 8``, then ``--pool prefork
-c 2``) serving ``bench.peers.apps``: one conversation (this process, one ``Client``) runs
``--turns`` turns of ``n`` calls of ``nap(seconds)`` (a sleep: an I/O-bound call holding its
slot), waiting for all of them, for every ``n`` and ``seconds``; prints the turn's p50 and
p90 against the ideal (``seconds`` times the calls a slot must run one after the other:
``ceil(n / slots)``). Run it from a checkout to measure that checkout's code.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.figures import percentile  # noqa: E402
from bench.peers.toolq_side import ToolqWorker  # noqa: E402
from bench.procs import Procs, bench_redis  # noqa: E402

SHAPES = (("threads", 8), ("prefork", 2))
WARM = 3


def turns(client: object, n: int, seconds: float, count: int) -> list[float]:
    """``count`` turns of ``n`` naps: each turn's milliseconds, dispatch to last result."""
    took = []
    for k in range(WARM + count):
        calls = [
            {"id": f"call_{uuid.uuid4().hex}", "name": "nap", "arguments": {"seconds": seconds}}
            for _ in range(n)
        ]
        started = time.perf_counter()
        results = client.dispatch(calls).wait(timeout=60)  # type: ignore[attr-defined]
        if any(r.status.value != "succeeded" for r in results):
            raise RuntimeError(f"nap did not succeed: {[r.status for r in results]}")
        if k >= WARM:
            took.append((time.perf_counter() - started) * 1000)
    return took


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--turns", type=int, default=20)
    p.add_argument("--calls", default="2,3", help="calls per turn (comma-separated)")
    p.add_argument("--seconds", default="0.002,0.02", help="each call's nap (comma-separated)")
    args = p.parse_args(argv)
    counts = [int(x) for x in args.calls.split(",")]
    naps = [float(x) for x in args.seconds.split(",")]
    print(f"# python -m bench.probes.turn_spread {' '.join(argv or sys.argv[1:])}")
    print("| worker | calls x nap | turn p50 ms | turn p90 ms | ideal ms | p50 / ideal |")
    print("|---|---|---|---|---|---|")
    with bench_redis(None) as url, tempfile.TemporaryDirectory() as tmp:
        for pool, slots in SHAPES:
            procs = Procs()
            log = Path(tmp) / f"{pool}.log"
            with ToolqWorker(procs, url, pool=pool, concurrency=slots, log=log) as side:
                for n in counts:
                    for seconds in naps:
                        took = turns(side.client, n, seconds, args.turns)
                        ideal = seconds * 1000 * math.ceil(n / slots)
                        p50, p90 = percentile(took, 50), percentile(took, 90)
                        print(
                            f"| {pool} -c {slots} | {n} x {seconds * 1000:g} ms | {p50:.1f} "
                            f"| {p90:.1f} | {ideal:.0f} | {p50 / ideal:.2f}x |",
                            flush=True,
                        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
