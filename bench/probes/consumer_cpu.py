"""A worker's consumer CPU per message: kombu's Redis transport on an event loop, no Celery.

```bash
python -m bench.probes.consumer_cpu --messages 5000
```

Starts a private Redis, pushes toolq call messages onto the safe queue as dispatch does,
and consumes them in this process as a worker's consumer does (a prefork worker's parent, a
threads worker's consumer thread): kombu's Redis transport registered with a kombu ``Hub``,
``BRPOP``, the record of each taken message in kombu's ``unacked``, delivery to a callback.
The callback acknowledges as a prefork parent does after its child carried the entry away
(``toolq.broker.acks``: no round trip). Prints this thread's CPU per message (Celery's
strategy, its pool and the children left out). The first fifth of the messages warms up.
Compare code against code in alternated runs.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from bench.procs import bench_redis


def main() -> int:
    import redis
    from kombu import Connection, Consumer, Queue
    from kombu.asynchronous import Hub

    from toolq import RiskLevel, Settings
    from toolq.broker import Publisher, acks, celery_app

    parser = argparse.ArgumentParser(prog="python -m bench.probes.consumer_cpu")
    parser.add_argument("--messages", type=int, default=5000)
    args = parser.parse_args()
    with bench_redis(None) as url:
        settings = Settings(redis_url=url)
        app = celery_app(settings)  # installs toolq's kombu patches
        publisher = Publisher(app, settings)
        r = redis.Redis.from_url(url)
        queue, _ = publisher.message("c", RiskLevel.SAFE, None, "run")
        messages = [
            publisher.message(f"c{i}", RiskLevel.SAFE, None, "run")[1] for i in range(args.messages)
        ]
        for start in range(0, len(messages), 500):
            r.lpush(queue, *messages[start : start + 500])
        received = 0

        def on_message(_body: Any, message: Any) -> None:
            nonlocal received
            acks.sent(message.delivery_tag)  # carried by the child: no round trip here
            message.ack()
            received += 1

        hub = Hub()
        conn = Connection(url)
        try:
            consumer = Consumer(conn.channel(), queues=[Queue(queue)], callbacks=[on_message])
            consumer.qos(prefetch_count=1)
            consumer.consume()
            conn.transport.register_with_event_loop(conn.connection, hub)
            warm = args.messages // 5
            while received < warm:
                hub.run_once()
            cpu0, wall0 = time.thread_time(), time.perf_counter()
            while received < args.messages:
                hub.run_once()
            cpu, wall = time.thread_time() - cpu0, time.perf_counter() - wall0
        finally:
            hub.close()
            conn.close()
            app.close()
    n = args.messages - warm
    print(f"{n} messages: {1e6 * cpu / n:.1f} µs of the consumer thread's CPU per message "
          f"({n / wall:.0f} messages/s)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
