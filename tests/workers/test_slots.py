"""A worker's slots on real `toolq worker` processes: ``--concurrency`` bounds the synchronous
calls it runs at once, ``--async-concurrency`` the ``async def`` ones, whatever the number of
calls a message carries; a busy slot gives back what it cannot start, so free ones (in the
same worker or another) take it; a flooded rate limit starts calls at its rate.

The bounds are counted exactly by the tools (a Redis counter around each call), the spread by
the process ids they record: no wall-clock assertion but the rate limit's, over seconds.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from tests.conftest import Workers
from tests.slots_app import PIDS, TICKS, most_at_once, registry
from toolq import CallStatus, Client
from toolq.cli.check import live_workers
from toolq.settings import Settings

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

APP = {"TOOLQ_APP": "tests.slots_app:registry"}


@pytest.fixture
def slots_client(settings: Settings) -> Iterator[Client]:
    with Client(registry, settings) as c:
        yield c


def naps(n: int, name: str = "nap", seconds: float = 0.2) -> list[dict[str, object]]:
    return [{"id": f"{name}{i}", "name": name, "arguments": {"seconds": seconds}}
            for i in range(n)]  # fmt: skip


def short_naps(n: int, prefix: str, seconds: float, name: str = "nap") -> list[dict[str, object]]:
    return [{"id": f"{prefix}{i}", "name": name, "arguments": {"seconds": seconds}}
            for i in range(n)]  # fmt: skip


def all_succeed(client: Client, calls: list[dict[str, object]], timeout: float = 60) -> None:
    results = client.dispatch(calls).wait(timeout=timeout)
    assert [x.status for x in results] == [CallStatus.SUCCEEDED] * len(calls)


@pytest.mark.parametrize(("pool", "concurrency"), [("threads", 4), ("prefork", 2)])
def test_concurrency_bounds_the_synchronous_calls_of_shared_messages(
    r: redis.Redis, slots_client: Client, workers: Workers, pool: str, concurrency: int
) -> None:
    workers.start("safe", pool=pool, concurrency=concurrency, **APP)
    all_succeed(slots_client, naps(8 * concurrency))  # in messages of 16 calls
    assert most_at_once(r, "sync") == concurrency


def test_a_message_s_short_calls_run_at_once_on_a_threads_worker_s_idle_threads(
    r: redis.Redis, slots_client: Client, workers: Workers
) -> None:
    """A turn's calls, shorter than a give-back's wait, in one message: while the worker's
    other threads run nothing, a share goes to each of them after a few milliseconds
    instead of waiting behind the first call."""
    workers.start("safe", pool="threads", concurrency=4, **APP)
    for turn in range(3):  # 45 ms each: one after the other, none would ever be given back
        all_succeed(slots_client, short_naps(4, f"t{turn}-", 0.045))
    assert most_at_once(r, "sync") >= 3


def test_a_message_s_short_calls_spread_over_a_prefork_worker_s_idle_process(
    r: redis.Redis, slots_client: Client, workers: Workers
) -> None:
    workers.start("safe", pool="prefork", concurrency=2, **APP)
    for turn in range(3):  # 30 ms each, in one message
        all_succeed(slots_client, short_naps(2, f"b{turn}-", 0.03, "burn"))
    pids = [int(p) for p in r.lrange(PIDS, 0, -1)]
    assert len(pids) == 6 and len(set(pids)) == 2


def test_short_calls_handed_to_idle_threads_never_exceed_the_concurrency(
    r: redis.Redis, slots_client: Client, workers: Workers
) -> None:
    """Three dispatches of 4 short calls at once on a threads worker of 4 slots."""
    workers.start("safe", pool="threads", concurrency=4, **APP)
    batches = [slots_client.dispatch(short_naps(4, f"m{i}-", 0.1)) for i in range(3)]
    for batch in batches:
        assert [x.status for x in batch.wait(timeout=60)] == [CallStatus.SUCCEEDED] * 4
    assert most_at_once(r, "sync") == 4


@pytest.mark.parametrize(("pool", "concurrency"), [("threads", 2), ("prefork", 2)])
def test_async_concurrency_bounds_the_async_calls(
    r: redis.Redis, slots_client: Client, workers: Workers, pool: str, concurrency: int
) -> None:
    # prefork: each of the two processes runs at most 4 // 2 = 2 on its loop
    workers.start("safe", pool=pool, concurrency=concurrency, TOOLQ_ASYNC_CONCURRENCY="4", **APP)
    all_succeed(slots_client, naps(24, "anap"))
    seen = most_at_once(r, "async")
    assert seen <= 4
    assert seen > (2 if pool == "prefork" else 3)  # both processes' loops, or the one's all


def test_a_message_of_cpu_bound_calls_spreads_over_both_processes(
    r: redis.Redis, slots_client: Client, workers: Workers
) -> None:
    workers.start("safe", pool="prefork", concurrency=2, **APP)
    all_succeed(slots_client, naps(16, "burn", 0.1))
    pids = [int(p) for p in r.lrange(PIDS, 0, -1)]
    assert len(pids) == 16 and len(set(pids)) == 2


def test_a_message_of_cpu_bound_calls_spreads_over_two_workers(
    r: redis.Redis, slots_client: Client, workers: Workers, settings: Settings, wait_for
) -> None:
    for _ in range(2):
        workers.start("safe", pool="prefork", concurrency=1, **APP)
    # the queue has a consumer once the first is up: wait for the second too
    wait_for(lambda: len(live_workers(settings)) == 2, timeout=30)
    all_succeed(slots_client, naps(16, "burn", 0.1))
    pids = [int(p) for p in r.lrange(PIDS, 0, -1)]
    assert len(pids) == 16 and len(set(pids)) == 2


# Delivering 10/s takes a worker that gets the CPU it asks for: beside a second copy of the
# suite (load 15) it delivered 7.2/s, never above 10/s.
@pytest.mark.serial
def test_a_flooded_rate_limit_starts_calls_at_its_rate_and_never_above(
    r: redis.Redis, slots_client: Client, workers: Workers
) -> None:
    # sweeps at the default interval: admission must not wait for them
    workers.start("safe", pool="threads", concurrency=4, TOOLQ_SWEEP_INTERVAL="1", **APP)
    calls = [{"id": f"t{i}", "name": "tick", "arguments": {"n": i}} for i in range(50)]
    batch = slots_client.dispatch(calls)
    assert [x.status for x in batch.wait(timeout=60)] == [CallStatus.SUCCEEDED] * 50
    assert r.llen(TICKS) == 50
    # the limit counts starts (START's time, as recorded)
    starts = sorted(float(rec["started_at"]) for rec in slots_client.store.records(batch.call_ids))
    for i in range(len(starts) - 10):  # "10/s": never 11 starts within a second
        assert starts[i + 10] - starts[i] > 1.0, starts[i : i + 11]
    # delivered: 10 starts per mean time 10 consecutive starts spanned, at least 0.9x
    spans = [starts[i + 10] - starts[i] for i in range(len(starts) - 10)]
    assert 10 / (sum(spans) / len(spans)) >= 9.0, spans
