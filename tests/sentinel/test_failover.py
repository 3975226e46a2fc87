"""Redis Sentinel: clients and real workers follow the master through a SIGKILL failover.

Each test starts its own master, replicas and Sentinel (``bench/chaos/sentinel.py``);
``TOOLQ_REDIS_URL`` points at a closed port, so only the Sentinels can lead toolq to the data.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
import redis

from bench.chaos.sentinel import SentinelGroup
from tests.conftest import Workers, make_settings, serve
from tests.sentinel.app import executions, registry
from toolq import CallStatus, Client, Settings
from toolq.api.app import create_app
from toolq.cli.check import live_workers
from toolq.errors import NotAwaitingApprovalError, ReplicationError, WaitTimeoutError
from toolq.history.archiver import Archiver, ensure_group
from toolq.history.store import HistoryStore
from toolq.keys import Keys
from toolq.models import Event, EventType
from toolq.redis_target import RedisTarget
from toolq.results.connection import as_text, async_redis_client, master_address, redis_client
from toolq.results.events import stream_id_key
from toolq.results.hub import EventHub
from toolq.settings import ApiToken
from toolq.webhooks.outbox import Claimed
from toolq.webhooks.provenance import Provenance, Unconfirmed

pytestmark = pytest.mark.e2e

FINAL = {CallStatus.SUCCEEDED, CallStatus.FAILED, CallStatus.CANCELLED}


def sentinel_settings(group: SentinelGroup, **overrides: object) -> Settings:
    return make_settings(**group.settings(), app="tests.sentinel.app:registry", **overrides)


def charges(prefix: str, count: int, seconds: float) -> list[dict[str, object]]:
    return [
        {"id": f"{prefix}{i}", "name": "charge", "arguments": {"amount": i, "seconds": seconds}}
        for i in range(count)
    ]


def test_workers_follow_the_master_through_a_failover(
    make_group: Callable[..., SentinelGroup], tmp_path: Path
) -> None:
    """(a) Calls in flight when the master is SIGKILLed all end; none ran twice.

    Every replica acknowledges each write (``TOOLQ_MIN_REPLICAS_ACK`` = replicas), so
    whichever one the Sentinel promotes holds every start and final state a worker or a
    client counted on; the killed master comes back as a replica, as an orchestrator
    restarts it, and the writes that waited for it go on.
    """
    group = make_group(replicas=2)
    # One message per call, so that 8 slots leave some of the 24 calls queued at the kill.
    settings = sentinel_settings(group, min_replicas_ack=2, lease_seconds=5.0, calls_per_message=1)
    log = tmp_path / "executions"
    env = {
        **group.env(),
        "TOOLQ_APP": "tests.sentinel.app:registry",
        "TOOLQ_MIN_REPLICAS_ACK": "2",
        "TOOLQ_TEST_EXEC_LOG": str(log),
    }
    workers = Workers(settings)
    client = Client(registry, settings)
    try:
        for _ in range(2):
            workers.start("safe", concurrency=4, log=tmp_path / "workers.log", **env)
        deadline = time.monotonic() + 30
        while len(live_workers(settings)) < 2:
            assert time.monotonic() < deadline, "the second worker did not come up"
            time.sleep(0.1)
        before = client.dispatch(charges("a", 24, 0.3), run_id="before")
        time.sleep(0.5)  # some calls are running, some queued
        old = group.master_port()
        group.node_at(old).kill()
        in_flight = len(executions(str(log)))
        new = group.wait_failover(old)
        deadline = time.monotonic() + 20
        while True:  # the Sentinels name the new master once it has taken the role (on a
            # loaded machine one of them may still name the old one for a while)
            try:
                if master_address(settings) == ("127.0.0.1", new):
                    break
            except redis.sentinel.MasterNotFoundError:
                pass
            assert time.monotonic() < deadline, "the Sentinels did not name the new master"
            time.sleep(0.1)
        group.rejoin(group.node_at(old), new)
        # Until the rejoined node has synced, a dispatch is refused as not acknowledged by
        # both replicas; repeating it with the same ids is safe, as the error says.
        deadline = time.monotonic() + 30
        while True:
            try:
                after = client.dispatch(charges("b", 8, 0.1), run_id="after")
                break
            except ReplicationError:
                assert time.monotonic() < deadline, "the rejoined replica never acknowledged"
                time.sleep(0.2)
        # A call whose FINISH the dying master never passed on, and whose lease lapsed on
        # the new master before the worker's retry reached it, is unknown there (its tool is
        # not idempotent: a person decides), and no wait ends for it. Every other call ends.
        deadline = time.monotonic() + 90
        states: dict[str, CallStatus] = {}
        while True:
            try:  # a read the replicas do not confirm in time says so: read again shortly
                states = {r.call_id: r.status for run in (before, after) for r in run.results()}
            except ReplicationError:
                states = {}
            if states and all(s.is_final or s is CallStatus.UNKNOWN for s in states.values()):
                break
            assert time.monotonic() < deadline, states
            time.sleep(0.2)
        results = [
            *client.wait(
                [c for c in before.call_ids if states[c].is_final], run_id="before", timeout=60
            ),
            *client.wait(
                [c for c in after.call_ids if states[c].is_final], run_id="after", timeout=60
            ),
        ]
        unknown = {c for c, s in states.items() if s is CallStatus.UNKNOWN}
        assert {r.status for r in results} <= FINAL
        assert len(results) + len(unknown) == 32
        assert 0 < in_flight < 24, "the master died with no call running, or after all ran"
        assert unknown <= set(executions(str(log))[:in_flight]), "unknown, not in flight"
        ran = Counter(executions(str(log)))
        assert max(ran.values()) == 1, [c for c, n in ran.items() if n > 1]
        succeeded = {r.call_id for r in results if r.status is CallStatus.SUCCEEDED}
        assert succeeded <= set(ran), "a call reported as succeeded never ran"
        # Everything the workers did after the switch is on the master. Under load the
        # Sentinel may fail over a second time (the promoted node missed its PINGs for the
        # 1 s down-after period): whichever replica it is now, the final states are there.
        # (The killed master rejoined as a replica, so a second failover may promote it.)
        current = group.wait_master()
        promoted = group.direct(group.node_at(current))
        for result in results:
            status = promoted.hget(Keys().call(result.call_id), "status")
            assert status is not None and status.decode() == result.status.value
        assert [w.poll() for w in workers.procs] == [None, None], "a worker exited"
    finally:
        client.close()
        workers.stop_all()


def test_every_acknowledged_dispatch_survives_the_master(
    make_group: Callable[..., SentinelGroup],
) -> None:
    """(b) With TOOLQ_MIN_REPLICAS_ACK=1, a dispatch that returned is on the new master."""
    group = make_group(replicas=1)
    settings = sentinel_settings(group, min_replicas_ack=1)
    client = Client(registry, settings)
    acknowledged: list[str] = []
    refused: list[str] = []
    stop = threading.Event()

    def dispatch_forever() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            try:
                batch = client.dispatch(charges(f"c{n}-", 1, 0), run_id=f"run{n}")
            except (ReplicationError, redis.RedisError) as exc:
                refused.append(f"{type(exc).__name__}: {exc}")
                continue
            acknowledged.extend(batch.call_ids)

    thread = threading.Thread(target=dispatch_forever)
    try:
        thread.start()
        time.sleep(1.0)
        old = group.master_port()
        before_kill = len(acknowledged)
        group.node_at(old).kill()
        new = group.wait_failover(old)
        time.sleep(1.5)  # dispatches now meet a master without replicas
        stop.set()
        thread.join(30)
        assert before_kill > 10
        # The new master has no replica: nothing more was acknowledged after the switch.
        assert any(r.startswith("ReplicationError") for r in refused), refused
        promoted = group.direct(group.node_at(new))
        missing = [c for c in acknowledged if not promoted.exists(Keys().call(c))]
        assert not missing, f"{len(missing)} of {len(acknowledged)} acknowledged calls lost"
    finally:
        stop.set()
        thread.join(30)
        client.close()


def test_without_replica_nothing_is_acknowledged_and_a_retry_succeeds_once(
    make_group: Callable[..., SentinelGroup],
) -> None:
    """(c) A replica down: dispatch and approval fail; the same ids succeed once it is back."""
    group = make_group(replicas=1)
    settings = sentinel_settings(group, min_replicas_ack=1)
    client = Client(registry, settings)
    master = group.direct(group.master)
    keys = Keys()
    try:
        parked = client.dispatch(
            [
                {"id": "t1", "name": "transfer", "arguments": {"amount": 5}},
                {"id": "t2", "name": "transfer", "arguments": {"amount": 6}},
            ],
            run_id="run-c",
        )
        parked_id, later_id = parked.call_ids
        group.replicas[0].stop()
        payload = charges("d", 3, 0)
        with pytest.raises(ReplicationError) as refused:
            client.dispatch(payload, run_id="run-c")
        assert refused.value.code == "not_replicated"
        assert "0 of 1 replicas" in refused.value.message
        with pytest.raises(ReplicationError):
            client.approvals.approve(parked_id, by="alice")

        group.replicas[0].start()
        group.wait_replicas(group.master.port, 1)
        retried = client.dispatch(payload, run_id="run-c")
        again = client.dispatch(payload, run_id="run-c")
        assert retried.call_ids == again.call_ids
        run_calls = [c.decode() for c in master.lrange(keys.run_calls("run-c"), 0, -1)]
        assert sorted(run_calls) == sorted([parked_id, later_id, *retried.call_ids])
        queue = keys.queue_for("safe")
        # one shared message for the three calls (calls_per_message), none from the retries
        assert master.llen(queue) == 1
        # The refused approval had taken effect on the master: a retry finds it decided,
        # and the call was enqueued once.
        with pytest.raises(NotAwaitingApprovalError):
            client.approvals.approve(parked_id, by="alice")
        assert client.result(parked_id).status is CallStatus.QUEUED
        assert master.llen(keys.queue_for("moderate")) == 1
        # With the replica back, a decision is confirmed and acknowledged at once.
        assert client.approvals.deny(later_id, by="alice").status is CallStatus.DENIED
        assert group.direct(group.replicas[0]).hget(keys.call(later_id), "status") == b"denied"
    finally:
        client.close()


def test_the_api_answers_503_not_replicated(
    make_group: Callable[..., SentinelGroup],
) -> None:
    """The HTTP API reaches the master through the Sentinels and maps the error to 503."""
    from fastapi.testclient import TestClient

    from toolq.api.app import create_app
    from toolq.settings import ApiToken

    group = make_group(replicas=1)
    settings = sentinel_settings(group, min_replicas_ack=1)
    tokens = {"tok": ApiToken(principal="bot", roles=["submitter", "viewer"])}
    headers = {"Authorization": "Bearer tok"}
    with TestClient(create_app(settings, registry, tokens=tokens)) as http:
        body = [{"id": "h1", "name": "charge", "arguments": {"amount": 1, "seconds": 0}}]
        accepted = http.post("/v1/runs/run-h/calls", json=body, headers=headers)
        assert accepted.status_code == 202, accepted.text
        group.replicas[0].stop()
        refused = http.post("/v1/runs/run-h/calls", json=body, headers=headers)
        assert refused.status_code == 503
        assert refused.json()["error"]["code"] == "not_replicated"
        healthy = http.get("/healthz")
        assert healthy.status_code == 200, healthy.text


def test_connected_clients_reach_the_promoted_replica(
    make_group: Callable[..., SentinelGroup],
) -> None:
    """Sync and asyncio clients connected to the old master retry onto the new one."""
    group = make_group(replicas=1)
    settings = sentinel_settings(group)

    async def scenario() -> tuple[int, int, int, int]:
        sync = redis_client(settings)
        aio = async_redis_client(settings, 4)
        try:
            before = (
                int(sync.info("server")["tcp_port"]),
                int((await aio.info("server"))["tcp_port"]),
            )
            old = group.master_port()
            group.node_at(old).kill()
            # Commands sent during the failover wait (retry with backoff) for the new master.
            sync.set("toolq:test:after", "1")
            await aio.set("toolq:test:after-async", "1")
            after = (
                int(sync.info("server")["tcp_port"]),
                int((await aio.info("server"))["tcp_port"]),
            )
            return (*before, *after)
        finally:
            sync.close()
            await aio.aclose()

    old_sync, old_async, new_sync, new_async = asyncio.run(scenario())
    new = group.master_port()
    assert old_sync == old_async != new
    assert new_sync == new_async == new
    assert group.direct(group.node_at(new)).get("toolq:test:after-async") == b"1"


def test_check_names_the_master_it_found(make_group: Callable[..., SentinelGroup]) -> None:
    """``toolq check`` asks the Sentinels, then checks the master they name."""
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT

    group = make_group(replicas=1)
    env = {**os.environ, **group.env(), "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "toolq", "check", "--risk", ""],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert f"master: 127.0.0.1:{group.master.port} (Sentinel master 'toolq-test'" in done.stderr
    assert done.stdout.strip() == "ok"
    for node in [group.master, *group.replicas]:  # nothing left to promote
        node.kill()
    down = subprocess.run(
        [sys.executable, "-m", "toolq", "check", "--risk", ""],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert down.returncode == 1
    assert "Sentinel master 'toolq-test'" in down.stderr, down.stderr
    # Before the Sentinel marks it down: the address tried; after: that it knows none.
    tried = f"Sentinel master 'toolq-test' at 127.0.0.1:{group.master.port}: Error 111"
    assert tried in down.stderr or "No master found for 'toolq-test'" in down.stderr


def test_a_state_the_dead_master_never_replicated_is_not_reported(
    make_group: Callable[..., SentinelGroup], tmp_path: Path
) -> None:
    """A wait reports a final state only once the replicas hold it (a fence after the read).

    Here the worker's FINISH reaches only the master (its replica cut off), the client
    reads it and fences, and the master dies while the fence waits: the fence, retried on
    the promoted replica once the old master rejoined it, must not vouch for a state read
    on the dead one. It did (CI, under load): the client reported succeeded for a call the
    new master had running, which recovery then made unknown.
    """
    group = make_group(replicas=1)
    settings = sentinel_settings(
        group, min_replicas_ack=1, replica_ack_timeout_ms=3000, lease_seconds=5.0
    )
    env = {
        **group.env(),
        "TOOLQ_APP": "tests.sentinel.app:registry",
        "TOOLQ_MIN_REPLICAS_ACK": "0",  # this worker's FINISH waits for no replica
        "TOOLQ_LEASE_SECONDS": "5",
        "TOOLQ_TEST_EXEC_LOG": str(tmp_path / "executions"),
    }
    workers = Workers(settings)
    dispatcher = Client(registry, settings.model_copy(update={"min_replicas_ack": 0}))
    waiter = Client(registry, settings)
    try:
        workers.start("safe", concurrency=2, log=tmp_path / "workers.log", **env)
        old = group.master_port()
        master, replica = group.node_at(old), group.replicas[0]
        key = Keys().call(dispatcher.dispatch(charges("x", 1, 2.0), run_id="x").call_ids[0])
        call_id = key.rsplit(":", 1)[1]

        def status(node: object) -> bytes | None:
            value: bytes | None = group.direct(node).hget(key, "status")  # type: ignore[arg-type]
            return value

        deadline = time.monotonic() + 30
        while status(replica) != b"running":  # started, and the replica has it
            assert time.monotonic() < deadline, "the call never ran"
            time.sleep(0.02)
        group.direct(replica).config_set("masterauth", "not-the-password")
        group.direct(master).client_kill_filter(_type="replica")
        while status(master) != b"succeeded":  # the FINISH, on the master alone
            assert time.monotonic() < deadline, "the call never finished"
            time.sleep(0.02)
        assert status(replica) == b"running"
        reported: list[str] = []

        def wait() -> None:
            try:
                reported.extend(r.status.value for r in waiter.wait([call_id], timeout=20))
            except WaitTimeoutError:
                reported.append("not final")

        thread = threading.Thread(target=wait)
        thread.start()
        blocked = group.direct(master)
        while not any(c.get("cmd") == "wait" for c in blocked.client_list()):
            assert time.monotonic() < deadline, "the wait never fenced"  # it read succeeded
            time.sleep(0.01)
        master.kill()  # while the fence waits for the cut-off replica
        group.direct(replica).config_set("masterauth", group.password)
        new = group.wait_failover(old)
        group.rejoin(master, new)
        thread.join(60)
        assert not thread.is_alive()
        now = status(group.node_at(group.wait_master()))
        # The new master never had the FINISH: the call is running there, or unknown once
        # recovery found its lease lapsed (a person decides), and the wait is not over.
        assert now in (b"running", b"unknown")
        assert reported == ["not final"]  # before: ["succeeded"], a state the master lost
    finally:
        dispatcher.close()
        waiter.close()
        workers.stop_all()


def test_reads_report_no_final_state_the_replicas_do_not_hold(
    make_group: Callable[..., SentinelGroup], tmp_path: Path
) -> None:
    """Every way a client reads a call's outcome is fenced, not only a wait.

    A first call ends while the replica is there; a second one's FINISH reaches the master
    alone (its replica cut off). Then a read of the second's record refuses to report it
    (``ReplicationError``; ``503 not_replicated`` through the API), a listing of the run's
    events stops before a final event, a follower, the API's event hub (a listener there
    from before the cut, and one that joins after it, whose backlog the failed fence cuts
    before the first call's final event, which the hub was past) and a webhook delivery
    hold it back; once the replica has it again, each reports every event, once. Before,
    all of these reported ``succeeded`` at once: a state a failover right then would have
    taken back.
    """
    group = make_group(replicas=1)
    settings = sentinel_settings(group, min_replicas_ack=1, replica_ack_timeout_ms=300)
    env = {
        **group.env(),
        "TOOLQ_APP": "tests.sentinel.app:registry",
        "TOOLQ_MIN_REPLICAS_ACK": "0",  # this worker's FINISH waits for no replica
        "TOOLQ_TEST_EXEC_LOG": str(tmp_path / "executions"),
    }
    workers = Workers(settings)
    client = Client(registry, settings)
    tokens = {"view-t": ApiToken(principal="watcher", roles=["viewer"])}
    api = serve(create_app(settings, registry, tokens=tokens))
    url = next(api)
    viewer = {"Authorization": "Bearer view-t"}
    master, replica = group.node_at(group.master_port()), group.replicas[0]
    stream = Keys().run_stream("fenced")

    def finals(events: list[Event]) -> list[str]:
        return [e.call_id for e in events if e.type is EventType.SUCCEEDED]

    def cut_off_while_it_finishes(call_id: str) -> None:
        key, deadline = Keys().call(call_id), time.monotonic() + 30
        while group.direct(replica).hget(key, "status") != b"running":
            assert time.monotonic() < deadline, "the call never ran"
            time.sleep(0.02)
        group.direct(replica).config_set("masterauth", "not-the-password")
        group.direct(master).client_kill_filter(_type="replica")
        while group.direct(master).hget(key, "status") != b"succeeded":
            assert time.monotonic() < deadline, "the call never finished"
            time.sleep(0.02)
        assert group.direct(replica).hget(key, "status") == b"running"

    try:
        workers.start("safe", concurrency=2, log=tmp_path / "workers.log", **env)
        first = client.dispatch(charges("a", 1, 0.0), run_id="fenced")
        assert first.wait(timeout=30)[0].status is CallStatus.SUCCEEDED  # confirmed
        batch = client.dispatch(charges("x", 1, 1.0), run_id="fenced")
        early, call_id = first.call_ids[0], batch.call_ids[0]
        followed: list[Event] = []

        async def through_the_hub() -> tuple[list[Event], list[Event]]:
            hub = EventHub(RedisTarget.of(settings), Keys(), 10)
            hub.acks = client.store.acks
            try:
                before, seen = await hub.join("fenced", None)  # past the first final event
                assert finals(seen) == [early]
                await asyncio.to_thread(cut_off_while_it_finishes, call_id)
                await asyncio.to_thread(reads_hold_it_back)
                after, backlog = await hub.join("fenced", None)
                assert finals(backlog) == []  # the failed fence cuts at the first final
                await asyncio.sleep(1.5)  # the hub reads on, and holds the final event back
                got = {before: seen, after: backlog}
                for listener, out in got.items():
                    while not listener.queue.empty():
                        out.append(listener.queue.get_nowait())
                    assert call_id not in finals(out)
                assert call_id not in finals(followed)
                await asyncio.to_thread(
                    group.direct(replica).config_set, "masterauth", group.password
                )
                for listener, out in got.items():
                    while call_id not in finals(out):
                        out.append(await asyncio.wait_for(listener.queue.get(), 20))
                return seen, backlog
            finally:
                await hub.close()

        def reads_hold_it_back() -> None:
            with pytest.raises(ReplicationError, match="not reported"):
                client.result(call_id)
            with pytest.raises(ReplicationError):
                client.results("fenced")
            with pytest.raises(ReplicationError):
                client.store.statuses([call_id])
            reply = httpx.get(f"{url}/v1/calls/{call_id}", headers=viewer)
            assert reply.status_code == 503, reply.text
            assert reply.json()["error"]["code"] == "not_replicated"
            assert reply.headers["retry-after"] == "1"
            assert finals(list(client.events("fenced"))) == []  # cut at the first final
            threading.Thread(target=lambda: followed.extend(batch.events(timeout=30))).start()

        seen, backlog = asyncio.run(through_the_hub())
        # Every event, in order, once its repeats are dropped as the SSE route drops them
        # (the hub read again from where the second backlog was cut, so the first listener
        # got the first call's final event twice; the second got it after all).
        for events in (seen, backlog):
            shown: dict[str, Event] = {}
            for event in events:
                shown.setdefault(event.id, event)
            assert finals(sorted(shown.values(), key=lambda e: stream_id_key(e.id))) == [
                early,
                call_id,
            ]
        deadline = time.monotonic() + 30
        while call_id not in finals(followed):
            assert time.monotonic() < deadline, "the follower never saw the final event"
            time.sleep(0.05)
        assert client.result(call_id).status is CallStatus.SUCCEEDED
        assert finals(list(client.events("fenced"))) == [early, call_id]
        reply = httpx.get(f"{url}/v1/calls/{call_id}", headers=viewer)
        assert reply.json()["status"] == "succeeded"
        final_id = next(
            as_text(i)
            for i, f in group.direct(master).xrange(stream)
            if f[b"type"] == b"call.succeeded" and f[b"call_id"] == call_id.encode()
        )
        claimed = Claimed("d", "h", 1, "fenced", final_id, "call.succeeded", call_id)
        provenance = Provenance(client.redis, Keys(), None, client.store.acks)
        assert provenance.notice(claimed, {"call.succeeded"}).type == "call.succeeded"
        group.direct(replica).config_set("masterauth", "not-the-password")
        group.direct(master).client_kill_filter(_type="replica")
        with pytest.raises(Unconfirmed):  # the replica away: a delivery is put off
            provenance.notice(claimed, {"call.succeeded"})
    finally:
        api.close()
        client.close()
        workers.stop_all()


def test_the_history_archives_only_what_the_replicas_hold(
    make_group: Callable[..., SentinelGroup], tmp_path: Path
) -> None:
    """A call final on the master alone (its replica cut off) is not written to the history
    store, where a failover could no longer take it back; once the replica holds it, the
    archiver's next claim writes it. Before, it was archived at once."""
    group = make_group(replicas=1)
    settings = sentinel_settings(
        group, min_replicas_ack=1, replica_ack_timeout_ms=300, history_claim_after=0.5
    )
    alone = Client(registry, sentinel_settings(group))  # writes without waiting for replicas
    history = HistoryStore(f"sqlite:///{tmp_path}/history.db")
    master, replica = group.node_at(group.master_port()), group.replicas[0]
    try:
        archiver = Archiver(alone.redis, Keys(), settings, history, "a1")
        ensure_group(alone.redis, Keys())
        group.direct(replica).config_set("masterauth", "not-the-password")
        group.direct(master).client_kill_filter(_type="replica")
        batch = alone.dispatch([{"id": "n", "name": "nope", "arguments": {}}], run_id="h")
        [call_id] = batch.call_ids
        assert group.direct(master).hget(Keys().call(call_id), "status") == b"failed"
        assert group.direct(replica).exists(Keys().call(call_id)) == 0
        with pytest.raises(ReplicationError, match="0 of 1 replicas"):
            archiver.step(100)
        assert history.record(call_id) is None
        group.direct(replica).config_set("masterauth", group.password)
        deadline = time.monotonic() + 30
        archived = 0
        while not archived:
            assert time.monotonic() < deadline, "never archived once the replica was back"
            time.sleep(0.2)
            try:
                archived = archiver.step(100)
            except ReplicationError:  # not synced yet
                continue
        record = history.record(call_id)
        assert record is not None and record["status"] == "failed"
    finally:
        history.close()
        alone.close()
