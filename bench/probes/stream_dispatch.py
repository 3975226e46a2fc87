"""How much earlier a call starts with ``dispatch_stream`` than with a dispatch after the stream.

```bash
python -m bench.probes.stream_dispatch                 # 5 alternated rounds
python -m bench.probes.stream_dispatch --fragments 20 --interval 0.02
```

A paced Anthropic message stream (the anthropic SDK's event models) of ``--calls`` ``echo``
tool calls, each argument JSON in ``--fragments`` ``input_json_delta`` pieces ``--interval``
seconds apart (about a model's token pace), is read two ways against one ``toolq worker
--pool threads -c 8`` on a private Redis: ``client.dispatch_stream(stream)``, or collecting
the stream and then ``client.dispatch(tool_use blocks)``. Per way: from the stream's first
event to the first call's ``call.started`` (its event's ``ts``) and to the last call's.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.procs import Procs, bench_redis


def paced_stream(calls: int, fragments: int, interval: float) -> Iterator[Any]:
    """Anthropic stream events of ``calls`` tool calls, paced like a model writing them."""
    from anthropic.types import (
        InputJSONDelta,
        RawContentBlockDeltaEvent,
        RawContentBlockStartEvent,
        RawContentBlockStopEvent,
        ToolUseBlock,
    )

    for i in range(calls):
        text = "x" * fragments
        raw = '{"text": "' + text + '"}'
        step = max(1, len(raw) // fragments)
        yield RawContentBlockStartEvent(
            type="content_block_start",
            index=i,
            content_block=ToolUseBlock(type="tool_use", id=f"t{i}", name="echo", input={}),
        )
        for k in range(0, len(raw), step):
            time.sleep(interval)
            yield RawContentBlockDeltaEvent(
                type="content_block_delta",
                index=i,
                delta=InputJSONDelta(type="input_json_delta", partial_json=raw[k : k + step]),
            )
        yield RawContentBlockStopEvent(type="content_block_stop", index=i)


def started_after(client: Any, run_id: str, t0: float, call_ids: list[str]) -> list[float]:
    """Seconds from ``t0`` (wall clock) to each call's ``call.started`` event."""
    client.wait(call_ids, timeout=60, run_id=run_id)
    starts = {e.call_id: e.ts for e in client.events(run_id) if e.type.value == "call.started"}
    return [starts[c] - t0 for c in call_ids]


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.probes.stream_dispatch")
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--fragments", type=int, default=10)
    parser.add_argument("--interval", type=float, default=0.02)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    from bench.peers.toolq_side import ToolqWorker
    from tests.apps import registry
    from toolq import Client, Settings
    from toolq.dispatch.providers.streams import StreamedCalls

    figures: dict[str, list[tuple[float, float]]] = {"dispatch_stream": [], "after": []}
    procs = Procs()
    log = Path(tempfile.mkdtemp(prefix="stream-dispatch-")) / "worker.log"
    with bench_redis(None) as url:
        try:
            app = "tests.apps:registry"
            with ToolqWorker(procs, url, pool="threads", concurrency=8, log=log, app=app):
                client = Client(registry, Settings(redis_url=url))
                try:
                    for r in range(args.rounds):
                        ways = ["dispatch_stream", "after"]
                        for way in ways if r % 2 == 0 else reversed(ways):
                            stream = paced_stream(args.calls, args.fragments, args.interval)
                            t0 = time.time()
                            if way == "dispatch_stream":
                                batches = client.dispatch_stream(stream)
                                ids = [b.call_ids[0] for b in batches]
                                run_id = batches[0].run_id
                            else:
                                assembled = StreamedCalls()
                                blocks = [c for e in stream for c in assembled.feed(e)]
                                batch = client.dispatch(blocks)
                                ids, run_id = batch.call_ids, batch.run_id
                            starts = started_after(client, run_id, t0, ids)
                            figures[way].append((starts[0], starts[-1]))
                finally:
                    client.close()
        finally:
            procs.stop_all()
    stream_s = args.calls * (args.fragments + 1) * args.interval
    print(
        f"# python -m bench.probes.stream_dispatch {' '.join(sys.argv[1:])}\n"
        f"# {args.calls} calls, {args.fragments} fragments each, {args.interval * 1000:g} ms "
        f"apart (the stream lasts ~{stream_s:.2f} s); medians of {args.rounds} rounds\n"
    )
    print("| way | first call started after | last call started after |")
    print("|---|---|---|")
    for way, pairs in figures.items():
        first = statistics.median(p[0] for p in pairs) * 1000
        last = statistics.median(p[1] for p in pairs) * 1000
        print(f"| {way} | {first:.0f} ms | {last:.0f} ms |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
