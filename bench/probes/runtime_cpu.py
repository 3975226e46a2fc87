"""The worker runtime's own CPU per call: ``WorkerRuntime.run_many`` in this process, no Celery.

```bash
python -m bench.probes.runtime_cpu --calls 6000
```

Starts a private Redis, dispatches 2-call batches of ``noop`` with a ``Client`` (nothing
consumes the messages), then runs each batch with ``run_many`` on this thread, as a pool
slot does with a message, and prints the thread's CPU per call (the lease keeper's and
other threads' excluded): ``START``, the run, ``FINISH``, without Celery's and kombu's share.
The first quarter of the batches warms up. Compare code against code in alternated runs.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid

from bench.peers.apps import registry
from bench.procs import bench_redis


def main() -> int:
    from toolq import Client, Settings
    from toolq.workers.runtime import WorkerRuntime

    parser = argparse.ArgumentParser(prog="python -m bench.probes.runtime_cpu")
    parser.add_argument("--calls", type=int, default=6000)
    args = parser.parse_args()
    with bench_redis(None) as url:
        settings = Settings(redis_url=url)
        client = Client(registry, settings)
        runtime = WorkerRuntime(settings, registry)
        try:
            batches = []
            for _ in range(args.calls // 2):
                payload = [
                    {"id": f"call_{uuid.uuid4().hex}", "name": "noop", "arguments": {}}
                    for _ in range(2)
                ]
                batch = client.dispatch(payload)
                batches.append([(call.call_id, batch.run_id) for call in batch.calls])
            warm = len(batches) // 4
            for pairs in batches[:warm]:
                runtime.run_many(pairs, None, dict.fromkeys((c for c, _ in pairs), False))
            started = time.thread_time()
            for pairs in batches[warm:]:
                runtime.run_many(pairs, None, dict.fromkeys((c for c, _ in pairs), False))
            spent = time.thread_time() - started
        finally:
            runtime.close()
            client.close()
    calls = 2 * (len(batches) - warm)
    print(f"{calls} calls: {spent / calls * 1e6:.1f} µs of the slot thread's CPU per call")
    return 0


if __name__ == "__main__":
    sys.exit(main())
