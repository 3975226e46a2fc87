"""A prefork pool's result pipes are registered with epoll once, not after every message."""

from __future__ import annotations

import time

from celery.concurrency.asynpool import AsynPool
from kombu.asynchronous import Hub

from tests.conftest import count_registrations
from toolq.workers.pool import patch_result_handler


def double(n: int) -> int:
    """The task the pool's child runs."""
    return 2 * n


def test_each_result_pipe_is_registered_once_across_tasks() -> None:
    patch_result_handler()
    hub = Hub()
    registered = count_registrations(hub)
    pool = AsynPool(processes=1, threads=False)
    results: list[int] = []
    try:
        pool.register_with_event_loop(hub)
        deadline = time.monotonic() + 60
        for n in range(20):  # one at a time: each task's two messages read on their own turns
            pool.apply_async(double, (n,), callback=results.append)
            while len(results) <= n and time.monotonic() < deadline:
                hub.run_once()
        assert results == [2 * n for n in range(20)]
        [outq_fd] = pool._fileno_to_outq
        # Once when the pool adds its child's pipe; a message read in parts adds one more.
        assert registered.count(outq_fd) <= 3, registered
    finally:
        pool.terminate()
        pool.join()
        hub.close()
