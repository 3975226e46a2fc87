"""The I/O-bound case: ``n`` calls that each sleep, sent in one batch, on a running system.

Each function sends the batch the way the system's users would and returns the wall time
from the first send to the last result (seconds).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from toolq.models import CallStatus


def celery_naps(side: Any, n: int, seconds: float, timeout: float) -> float:
    """``n`` ``nap`` tasks on one producer, collected with ``join_native``."""
    from celery.result import ResultSet

    from bench.peers.apps import RAW_NAP, RAW_QUEUE
    from bench.peers.raw_celery_side import JOIN_INTERVAL

    task = side.app.tasks[RAW_NAP]
    t0 = time.perf_counter()
    with side.app.producer_or_acquire() as producer:
        results = [
            task.apply_async(args=[seconds], queue=RAW_QUEUE, producer=producer) for _ in range(n)
        ]
    ResultSet(results, app=side.app).join_native(timeout=timeout, interval=JOIN_INTERVAL)
    return time.perf_counter() - t0


def dramatiq_naps(side: Any, n: int, seconds: float, timeout: float) -> float:
    """``n`` ``nap.send()``, then every result in order."""
    t0 = time.perf_counter()
    messages = [side.app.nap.send(seconds) for _ in range(n)]
    for message in messages:
        message.get_result(backend=side.app.backend, block=True, timeout=int(timeout * 1000))
    return time.perf_counter() - t0


def toolq_naps(client: Any, n: int, seconds: float, timeout: float, tool: str = "nap") -> float:
    """One ``client.dispatch`` of ``n`` calls of ``tool`` (``nap`` or ``anap``), then ``wait``."""
    payload = [
        {"id": f"call_{uuid.uuid4().hex}", "name": tool, "arguments": {"seconds": seconds}}
        for _ in range(n)
    ]
    t0 = time.perf_counter()
    results = client.dispatch(payload).wait(timeout=timeout)
    elapsed = time.perf_counter() - t0
    bad = [r for r in results if r.status is not CallStatus.SUCCEEDED]
    if bad:
        raise RuntimeError(f"{len(bad)} {tool} calls did not succeed, e.g. {bad[0]}")
    return elapsed


def naps(system: str, side: Any, n: int, seconds: float, timeout: float) -> float:
    """The I/O-bound batch of ``system`` on its running ``side``."""
    if system == "celery":
        return celery_naps(side, n, seconds, timeout)
    if system == "dramatiq":
        return dramatiq_naps(side, n, seconds, timeout)
    return toolq_naps(side.client, n, seconds, timeout)
