"""A client's CPU per call for dispatching alone: one thread, no worker, no waiting.

```bash
python -m bench.probes.dispatch_cpu --dispatches 3000
```

Starts a private Redis and dispatches the agent workload's turns (1-3 no-op calls) from one
thread; the calls stay queued. Prints the process's CPU per call, the best of ``--repeats``
passes. One thread and no worker make it steadier than ``bench.agent`` on a loaded machine:
run it against two checkouts alternately (A, B, B, A) and compare the ratios.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid

from bench.agent import calls_in_turn
from bench.peers.apps import registry
from bench.procs import bench_redis
from toolq import Client, Settings


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.probes.dispatch_cpu")
    parser.add_argument("--dispatches", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with bench_redis(None) as url, Client(registry, Settings(redis_url=url)) as client:

        def turn(k: int) -> int:
            n = calls_in_turn(k)
            payload = [
                {"id": f"call_{uuid.uuid4().hex}", "name": "noop", "arguments": {}}
                for _ in range(n)
            ]
            client.dispatch(payload)
            return n

        for k in range(300):  # warm up: scripts loaded, connections open
            turn(k)
        best = float("inf")
        for _ in range(args.repeats):
            start, calls = time.process_time(), 0
            for k in range(args.dispatches):
                calls += turn(k)
            best = min(best, (time.process_time() - start) / calls * 1e6)
    print(f"# python -m bench.probes.dispatch_cpu {' '.join(sys.argv[1:])}")
    print(f"client CPU per call, dispatch only (best of {args.repeats}): {best:.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
