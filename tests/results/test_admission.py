"""The admission stage in process: backlogs, throttling, cancel, approvals, weights."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator

import pytest
import redis

from tests.conftest import InProcess, Workers, make_settings
from tests.tenancy_app import CAPPED, DONE, registry
from toolq import CallStatus, Client
from toolq.keys import Keys
from toolq.models import RiskLevel
from toolq.settings import Settings

APP = "tests.tenancy_app:registry"


@pytest.fixture
def tenants_client(settings: Settings) -> Iterator[Client]:
    with Client(registry, settings) as c:
        yield c


def events(client: Client, run_id: str, etype: str) -> list[dict[str, object]]:
    raw = client.redis.xrange(Keys().run_stream(run_id))
    return [
        {**json.loads(f[b"data"]), "call_id": f[b"call_id"].decode()}
        for _, f in raw
        if f[b"type"].decode() == etype
    ]


def test_without_tenants_or_limits_a_call_goes_straight_to_its_queue(
    tenants_client: Client, r: redis.Redis
) -> None:
    batch = tenants_client.dispatch([{"id": "a", "name": "work", "arguments": {"tag": "x"}}])
    call_id = batch.calls[0].call_id
    record = r.hgetall(Keys().call(call_id))
    assert b"lane" not in record and b"push_seq" in record  # pushed by CREATE itself
    assert not r.exists(Keys().lane(RiskLevel.SAFE))


def test_a_call_over_a_concurrency_cap_waits_queued_says_so_once_and_can_be_cancelled(
    tenants_client: Client, inproc: InProcess, r: redis.Redis, wait_for: Callable[..., None]
) -> None:
    inproc.start(app=APP, concurrency=4)
    first = tenants_client.dispatch([{"id": "a", "name": "solo", "arguments": {"seconds": 2}}])
    a = first.calls[0].call_id
    wait_for(lambda: r.exists(f"tenancy:started:{a}"), message="the first call never started")
    second = tenants_client.dispatch(
        [{"id": f"b{i}", "name": "solo", "arguments": {"seconds": 0}} for i in range(2)]
    )
    b, c = (ref.call_id for ref in second.calls)
    wait_for(lambda: len(events(tenants_client, second.run_id, "call.throttled")) == 2)
    for _ in range(3):
        inproc.made[0].sweep()  # more admissions while the slot is held: no new event
    throttled = events(tenants_client, second.run_id, "call.throttled")
    assert sorted(e["call_id"] for e in throttled) == sorted([b, c])
    assert {(e["limit"], e["scope"], e["name"]) for e in throttled} == {
        ("concurrency", "tool", "solo")
    }
    assert all(float(e["until"]) > 0 for e in throttled)  # type: ignore[arg-type]
    assert tenants_client.store.statuses([b, c]) == [CallStatus.QUEUED, CallStatus.QUEUED]
    assert not r.exists(f"tenancy:started:{b}")
    cancelled = tenants_client.cancel(b)
    assert cancelled.status is CallStatus.CANCELLED
    results = second.wait(timeout=30)
    assert [x.status for x in results] == [CallStatus.CANCELLED, CallStatus.SUCCEEDED]
    assert first.wait(timeout=30)[0].status is CallStatus.SUCCEEDED
    assert not r.exists(f"tenancy:started:{b}")  # the cancelled call never ran
    assert r.zcard(Keys().slots("tool", "solo")) == 0  # every slot given back
    assert not r.exists(Keys().backlog(RiskLevel.SAFE, "default"))


def test_an_approved_call_goes_through_admission(
    tenants_client: Client, inproc: InProcess, r: redis.Redis, wait_for: Callable[..., None]
) -> None:
    inproc.start(app=APP, concurrency=4)
    holder = tenants_client.dispatch([{"id": "a", "name": "solo", "arguments": {"seconds": 2}}])
    a = holder.calls[0].call_id
    wait_for(lambda: r.exists(f"tenancy:started:{a}"))
    # gated_solo has its own cap; the approval must not bypass it either
    gated = tenants_client.dispatch(
        [{"id": f"g{i}", "name": "gated_solo", "arguments": {}} for i in range(2)]
    )
    g1, g2 = (ref.call_id for ref in gated.calls)
    tenants_client.approvals.approve(g1, "alice")
    tenants_client.approvals.approve(g2, "alice")
    results = gated.wait(timeout=30)
    assert [x.status for x in results] == [CallStatus.SUCCEEDED] * 2
    record = r.hgetall(Keys().call(g1))
    assert record[b"admission"] == b"admitted"
    started = sorted(float(r.get(f"tenancy:started:{c}")) for c in (g1, g2))  # type: ignore[arg-type]
    assert len(started) == 2


def test_a_large_dispatch_is_admitted_while_its_later_calls_are_still_being_created(
    workers: Workers, r: redis.Redis
) -> None:
    # The dispatch's pipeline runs ADMIT every message's worth of backlogged calls: a
    # worker starts the first calls while the rest are still being created, as it does
    # with direct messages (before, admission waited for the whole pipeline). The run's
    # stream is in execution order, so a call.started ahead of the last call.queued shows
    # it, whatever the clocks say.
    tenants = {"acme": {}}
    # No sweep during the test: its ADMITs would admit mid-dispatch anyway.
    workers.start(
        "safe",
        concurrency=2,
        TOOLQ_APP=APP,
        TOOLQ_TENANTS=json.dumps(tenants),
        TOOLQ_SWEEP_INTERVAL="60",
    )
    with Client(registry, make_settings(tenants=tenants)) as client:
        calls = [
            {"id": f"c{i}", "name": "work", "arguments": {"tag": "x", "seconds": 0}}
            for i in range(3000)
        ]
        # Its scripts loaded first: a NOSCRIPT retry reruns the creates without the ADMITs.
        client.dispatch(calls[:20], tenant="acme").wait(timeout=30)
        batch = client.dispatch(calls, tenant="acme")
        order = [f[b"type"].decode() for _, f in r.xrange(Keys().run_stream(batch.run_id))]
        last_created = max(i for i, etype in enumerate(order) if etype == "call.queued")
        assert "call.started" in order[:last_created], "no call started before the last create"
        assert all(x.status is CallStatus.SUCCEEDED for x in batch.wait(timeout=120))


def test_tenants_are_admitted_in_proportion_to_their_weights(
    inproc: InProcess, r: redis.Redis
) -> None:
    tenants = {"light": {"weight": 1}, "heavy": {"weight": 3}}
    settings = make_settings(tenants=tenants, admission_depth=1, admission_batch=1)
    with Client(registry, settings) as client:
        light = client.dispatch(
            [
                {"id": f"l{i}", "name": "work", "arguments": {"tag": "l", "seconds": 0}}
                for i in range(30)
            ],
            tenant="light",
        )
        heavy = client.dispatch(
            [
                {"id": f"h{i}", "name": "work", "arguments": {"tag": "h", "seconds": 0}}
                for i in range(30)
            ],
            tenant="heavy",
        )
        worker = inproc.worker(
            app=APP, env={"TOOLQ_TENANTS": json.dumps(tenants)}, admission_depth=1
        )
        worker.start(1)
        light.wait(timeout=60)
        heavy.wait(timeout=60)
    order = [x.decode() for x in r.lrange(DONE, 0, -1)]
    first = order[:20]
    # one queued message at a time: after the light tenant's head start, 3 heavy per light
    assert first.count("h") >= 13, order


def test_a_scheduled_group_waits_as_one_entry_and_runs_without_its_cancelled_leader(
    inproc: InProcess, r: redis.Redis
) -> None:
    settings = make_settings(tenants={"*": {}}, admission_depth=1, admission_batch=4)
    with Client(registry, settings) as client:
        calls = [
            {"id": f"w{i}", "name": "work", "arguments": {"tag": "x", "seconds": 0}}
            for i in range(4)
        ]
        first = client.dispatch(calls)  # one message of 4, admitted: the queue is full now
        second = client.dispatch([{**c, "id": f"v{c['id']}"} for c in calls])
        backlog = Keys().backlog(RiskLevel.SAFE, "default")
        leader = second.calls[0].call_id
        assert r.lrange(backlog, 0, -1) == [leader.encode()]  # the group, as one entry
        assert r.hget(Keys().call(leader), "admission") == b"waiting"
        client.cancel(leader)
        inproc.start(app=APP, env={"TOOLQ_TENANTS": '{"*": {}}'})
        assert [x.status for x in first.wait(timeout=30)] == [CallStatus.SUCCEEDED] * 4
        statuses = [x.status for x in second.wait(timeout=30)]
        assert statuses == [CallStatus.CANCELLED] + [CallStatus.SUCCEEDED] * 3
    assert r.llen(DONE) == 7
    assert not r.exists(backlog)


def test_a_tenants_own_concurrency_cap_holds_below_the_tools(
    inproc: InProcess, r: redis.Redis
) -> None:
    tenants = {"narrow": {"concurrency": 1}}
    settings = make_settings(tenants=tenants)
    inproc.start(app=APP, concurrency=4, env={"TOOLQ_TENANTS": json.dumps(tenants)})
    with Client(registry, settings) as client:
        batch = client.dispatch(
            [{"id": f"c{i}", "name": "capped", "arguments": {"seconds": 0.3}} for i in range(3)],
            tenant="narrow",
        )
        assert all(x.status is CallStatus.SUCCEEDED for x in batch.wait(timeout=30))
        throttled = events(client, batch.run_id, "call.throttled")
    recorded = [json.loads(x) for x in r.lrange(CAPPED, 0, -1)]
    runs = sorted((start, end) for _, start, end in recorded)
    assert len(runs) == 3
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(runs))  # one at a time
    assert {(e["limit"], e["scope"], e["name"]) for e in throttled} == {
        ("concurrency", "tenant", "narrow")
    }


def test_the_tenants_report_counts_throttled_calls_and_slots_in_use(
    tenants_client: Client, inproc: InProcess, r: redis.Redis, wait_for: Callable[..., None]
) -> None:
    from toolq.dispatch.tenants import tenants_report

    inproc.start(app=APP, concurrency=4)
    first = tenants_client.dispatch([{"id": "a", "name": "solo", "arguments": {"seconds": 2}}])
    a = first.calls[0].call_id
    wait_for(lambda: r.exists(f"tenancy:started:{a}"), message="the first call never started")
    second = tenants_client.dispatch(
        [{"id": f"b{i}", "name": "solo", "arguments": {"seconds": 0}} for i in range(2)]
    )
    wait_for(lambda: len(events(tenants_client, second.run_id, "call.throttled")) == 2)
    report = tenants_report(tenants_client)
    [default] = [t for t in report.tenants if t.tenant == "default"]
    assert (default.calls.queued, default.calls.throttled, default.calls.running) == (2, 2, 1)
    [solo] = [t for t in report.tools if t.name == "solo"]
    assert solo.use is not None and solo.use.slots_held == 1
    assert [x.status for x in second.wait(timeout=30)] == [CallStatus.SUCCEEDED] * 2
    after = tenants_report(tenants_client)
    [default] = [t for t in after.tenants if t.tenant == "default"]
    assert (default.calls.queued, default.calls.throttled) == (0, 0)
    [solo] = [t for t in after.tools if t.name == "solo"]
    assert solo.use is not None and solo.use.slots_held == 0
