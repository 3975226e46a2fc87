"""Runs over two (and three) real Redis cells: routing, merged listings, a cell lost.

Each cell is a private ``redis-server`` this test starts (its own password, a free port);
a cell is lost by SIGKILLing the server the test started, by its PID.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest
import redis

from tests.apps import registry
from tests.cells.conftest import CellServers
from tests.conftest import ROOT, SECRETS_KEY, Workers, make_settings, serve
from toolq import Client
from toolq.api.app import create_app
from toolq.backend import Backend
from toolq.cells import FRESH_SECONDS, ApprovalRouter, home_cell
from toolq.dispatch.router import CellRouter
from toolq.errors import CallNotFoundError, CellUnavailableError
from toolq.models import CallStatus, RiskLevel
from toolq.settings import ApiToken, Settings
from toolq.signing import generate_pair
from toolq.testing import TestWorker

TOKENS = {
    "admin-t": ApiToken(principal="root", roles=["admin"]),
    "alice-t": ApiToken(
        principal="alice", roles=["viewer", "approver:moderate", "approver:dangerous"]
    ),
}


def h(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def echo(text: str) -> list[dict[str, object]]:
    return [{"id": "c1", "name": "echo", "arguments": {"text": text}}]


def wipe(target: str) -> list[dict[str, object]]:
    return [{"id": "w1", "name": "wipe", "arguments": {"target": target}}]


def run_in(cell: int, count: int, tag: str = "run") -> str:
    """A run id whose home is ``cell`` of ``count`` cells."""
    for n in range(10_000):
        run_id = f"{tag}-{cell}-{n}"
        if home_cell(run_id, count) == cell:
            return run_id
    raise AssertionError("no run id found")


def run_keys(server_url: str, run_id: str) -> int:
    client = redis.Redis.from_url(server_url)
    try:
        return int(client.exists(f"toolq:run:{run_id}:owner", f"toolq:run:{run_id}:calls"))
    finally:
        client.close()


@pytest.fixture
def two(cell_servers: CellServers) -> Iterator[Settings]:
    cell_servers.start(2)
    yield cell_servers.settings()


@pytest.fixture
def cell_workers(two: Settings) -> Iterator[list[TestWorker]]:
    workers = [TestWorker(two.for_cell(i), registry) for i in range(2)]
    for worker in workers:
        worker.start(2)
    yield workers
    for worker in workers:
        worker.close()


def test_the_cells_to_check_and_the_cell_to_serve_come_from_the_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from toolq.errors import ConfigurationError
    from toolq.redis_target import RedisTarget

    one = Settings(redis_url="redis://one:6400/0")
    assert RedisTarget.each_of(one) == [(None, RedisTarget("redis://one:6400/0"))]
    assert one.for_shard(None) is one
    with pytest.raises(ConfigurationError, match="needs TOOLQ_SHARDS"):
        one.for_shard(0)
    monkeypatch.setenv("TOOLQ_SHARDS", json.dumps(["redis://a:7000/0", "redis://b:7001/0"]))
    two = Settings()
    assert [(i, t.url) for i, t in RedisTarget.each_of(two)] == [
        (0, "redis://a:7000/0"),
        (1, "redis://b:7001/0"),
    ]
    assert two.for_shard(1).redis_url == "redis://b:7001/0"
    with pytest.raises(ConfigurationError, match="name the one to serve"):
        two.for_shard(None)
    with pytest.raises(
        ConfigurationError, match=r"--shard 2: TOOLQ_SHARDS lists 2 cells \(0 to 1\)"
    ):
        two.for_shard(2)
    # The API's gate checks a client's one Redis; a client over cells has none to check.
    with Client(registry, two) as over_cells, Client(registry, two.for_cell(0)) as one_cell:
        assert over_cells.redis_target is None
        assert one_cell.redis_target == RedisTarget("redis://a:7000/0")


def test_settings_shards_parse_and_each_cell_is_one_redis(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "TOOLQ_SHARDS",
        json.dumps(["redis://:pw@cell-a:7000/2", {"sentinels": ["s1:26379"], "master": "m1"}]),
    )
    monkeypatch.setenv("TOOLQ_REDIS_URL", "redis://:secret@ignored:1/4")
    settings = Settings()
    first, second = settings.for_cell(0), settings.for_cell(1)
    assert (first.redis_url, first.sentinels, first.shards, first.shard) == (
        "redis://:pw@cell-a:7000/2",
        None,
        [],
        0,
    )
    # A Sentinel cell takes its master's password and database from TOOLQ_REDIS_URL.
    assert (second.sentinels, second.sentinel_master, second.redis_url) == (
        "s1:26379",
        "m1",
        "redis://:secret@ignored:1/4",
    )
    from toolq.errors import ConfigurationError
    from toolq.redis_target import RedisTarget

    # Settings that list cells never reach a Redis of their own (the default URL) by mistake.
    with pytest.raises(ConfigurationError, match="TOOLQ_SHARDS lists 2 cells"):
        RedisTarget.of(settings)
    monkeypatch.setenv("TOOLQ_SHARDS", json.dumps(["http://not-redis"]))
    with pytest.raises(ValueError, match="not a redis"):
        Settings()
    monkeypatch.setenv("TOOLQ_SHARDS", json.dumps([{"sentinels": ["no-port"], "master": "m"}]))
    with pytest.raises(ValueError, match="not host:port"):
        Settings()


def test_without_shards_the_client_is_one_cell(settings: Settings) -> None:
    with Client(registry, settings) as client:
        assert not isinstance(client, CellRouter) and client.cell_clients == [client]
        assert client.cell_for_run("any") is client and client.cell_for_call("any") is client
        assert client.reachable() == ([(None, client)], []) and client.cell_states() == []


def test_with_shards_the_client_is_a_router_over_one_client_per_cell(
    two: Settings, cell_servers: CellServers
) -> None:
    with Client(registry, two) as client:
        assert isinstance(client, CellRouter)
        cells = client.cell_clients
        assert len(cells) == 2 and not any(isinstance(c, CellRouter) for c in cells)
        assert [c.settings.shard for c in cells] == [0, 1]
        assert isinstance(client.approvals, ApprovalRouter)
        assert not hasattr(client, "redis")  # no first cell standing in for all
    # a backend or a Redis client names one Redis: a plain client, shards or not
    with Client(registry, backend=Backend(two.for_cell(0), registry)) as one:
        assert not isinstance(one, CellRouter)


def test_runs_spread_over_both_cells_and_calls_are_found_by_id(
    two: Settings, cell_servers: CellServers, cell_workers: list[TestWorker]
) -> None:
    with Client(registry, two) as client:
        batches = [client.dispatch(echo(f"t{i}")) for i in range(16)]
        homes = [home_cell(b.run_id, 2) for b in batches]
        assert set(homes) == {0, 1}  # 16 random run ids: both cells get runs
        for batch, home in zip(batches, homes, strict=True):
            assert batch.wait(20)[0].status is CallStatus.SUCCEEDED
            # The run's keys are in its home cell and only there.
            assert run_keys(cell_servers.urls[home], batch.run_id) == 2
            assert run_keys(cell_servers.urls[1 - home], batch.run_id) == 0
    # A fresh client (nothing remembered) finds every call by its id alone, and every run.
    with Client(registry, two) as fresh:
        for batch in batches:
            [call_id] = batch.call_ids
            assert fresh.result(call_id).output == {"text": batch.results()[0].output["text"]}
            assert [r.call_id for r in fresh.results(batch.run_id)] == [call_id]
            assert [e.call_id for e in fresh.events(batch.run_id)][-1] == call_id
        with pytest.raises(CallNotFoundError):
            fresh.result("0" * 32)


def test_approvals_merge_and_are_decided_by_id_in_their_cell(
    two: Settings, cell_workers: list[TestWorker]
) -> None:
    runs = [run_in(0, 2, "appr"), run_in(1, 2, "appr")]
    with Client(registry, two) as client:
        parked = [
            client.dispatch(wipe(f"disk{i}"), run_id=run).call_ids[0] for i, run in enumerate(runs)
        ]
    with Client(registry, two) as fresh:
        pending = fresh.approvals.pending()
        assert sorted(p.call_id for p in pending) == sorted(parked)
        assert [p.call_id for p in fresh.approvals.pending(run_id=runs[1])] == [parked[1]]
        for call_id in parked:
            assert fresh.approvals.get(call_id).status is CallStatus.AWAITING_APPROVAL
            fresh.approvals.approve(call_id, "alice")
        results = [fresh.wait([c], timeout=20)[0] for c in parked]
        assert [r.output for r in results] == ["wiped disk0", "wiped disk1"]
        audit = fresh.approvals.audit()
        approved = {e.call_id for e in audit if e.outcome == "approved"}
        assert approved == set(parked)  # one entry in each cell's audit stream, merged


def test_api_routes_and_merges_every_cell(two: Settings, cell_workers: list[TestWorker]) -> None:
    for api in serve(create_app(two, registry, tokens=TOKENS)):
        runs = [run_in(0, 2, "api"), run_in(1, 2, "api")]
        done, parked = [], []
        for run in runs:
            got = httpx.post(f"{api}/v1/runs/{run}/calls", json=echo(run), headers=h("admin-t"))
            assert got.status_code == 202
            done.append(got.json()["calls"][0]["call_id"])
            got = httpx.post(f"{api}/v1/runs/{run}/calls", json=wipe(run), headers=h("admin-t"))
            parked.append(got.json()["calls"][0]["call_id"])
        for run, call_id in zip(runs, done, strict=True):
            deadline = time.monotonic() + 20
            while (
                httpx.get(f"{api}/v1/calls/{call_id}", headers=h("admin-t")).json()["status"]
                != "succeeded"
            ):
                assert time.monotonic() < deadline
                time.sleep(0.05)
            events = httpx.get(
                f"{api}/v1/runs/{run}/events", params={"follow": "false"}, headers=h("admin-t")
            ).json()
            assert call_id in {e["call_id"] for e in events}
            ticket = httpx.post(f"{api}/v1/runs/{run}/events/ticket", headers=h("admin-t"))
            streamed = httpx.get(
                f"{api}/v1/runs/{run}/events",
                params={"follow": "false", "ticket": ticket.json()["ticket"]},
            )
            assert streamed.status_code == 200 and streamed.json() == events
        pending = httpx.get(f"{api}/v1/approvals", headers=h("alice-t"))
        assert pending.status_code == 200 and "x-toolq-cells-down" not in pending.headers
        assert sorted(p["call_id"] for p in pending.json()) == sorted(parked)
        overview = httpx.get(f"{api}/v1/overview", headers=h("admin-t")).json()
        assert overview["pending_approvals"] == 2
        assert {c["call_id"] for c in overview["calls"]} == {*done, *parked}
        assert [c["up"] for c in overview["cells"]] == [True, True]
        # Each cell's worker, by its heartbeat (0.5 s here: a loaded machine can starve one
        # past its 1.5 s TTL, and its next beat brings it back).
        deadline = time.monotonic() + 20
        while {w["cell"] for w in overview["worker_list"]} != {0, 1}:
            assert time.monotonic() < deadline, overview["worker_list"]
            time.sleep(0.2)
            overview = httpx.get(f"{api}/v1/overview", headers=h("admin-t")).json()
        charts = httpx.get(f"{api}/v1/charts", headers=h("admin-t")).json()
        rates = sum(sum(series) for series in charts["rates"].values())
        assert rates * 60 == pytest.approx(4, abs=0.05)
        metrics = httpx.get(f"{api}/metrics", headers=h("admin-t")).text
        for shard in ("0", "1"):
            assert f'toolq_cell_up{{shard="{shard}"}} 1' in metrics
            assert f'toolq_pending_approvals{{shard="{shard}"}} 1' in metrics
            labels = f'shard="{shard}",tool="echo",risk="safe",type="call.succeeded"'
            assert f"toolq_call_events_total{{{labels}}} 1" in metrics
        for call_id in parked:
            decided = httpx.post(
                f"{api}/v1/approvals/{call_id}/deny", json={"reason": "no"}, headers=h("alice-t")
            )
            assert decided.status_code == 200 and decided.json()["status"] == "denied"
        health = httpx.get(f"{api}/healthz").json()
        assert health["status"] == "ok" and [c["up"] for c in health["cells"]] == [True, True]


def test_adding_a_cell_still_finds_runs_made_under_two(
    cell_servers: CellServers,
) -> None:
    cell_servers.start(3)
    two, three = cell_servers.settings(2), cell_servers.settings(3)
    # Runs whose home moves when the third cell is added: created under two cells.
    moved = [r for r in (f"grow-{n}" for n in range(200)) if home_cell(r, 2) != home_cell(r, 3)]
    moved = moved[:6]
    with Client(registry, two) as before:
        made = {run: before.dispatch(wipe(run), run_id=run).call_ids[0] for run in moved}
    workers = [TestWorker(three.for_cell(i), registry) for i in range(3)]
    for worker in workers:
        worker.start(1)
    try:
        with Client(registry, three) as after:
            assert sorted(p.call_id for p in after.approvals.pending()) == sorted(made.values())
            for run, call_id in made.items():
                assert [r.call_id for r in after.results(run)] == [call_id]
                after.approvals.approve(call_id, "alice")
                # A new call of an old run joins it in its old cell, not its new home.
                again = after.dispatch(echo(run), run_id=run)
                assert again.wait(20)[0].status is CallStatus.SUCCEEDED
                assert after.wait([call_id], timeout=20)[0].output == f"wiped {run}"
                old = home_cell(run, 2)
                assert run_keys(cell_servers.urls[old], run) == 2
                assert run_keys(cell_servers.urls[home_cell(run, 3)], run) == 0
                assert len(after.results(run)) == 2
    finally:
        for worker in workers:
            worker.close()


def start_cell_worker(cells: CellServers, shard: int, count: int) -> tuple[Workers, object]:
    """A real ``toolq worker --shard N`` process (TOOLQ_SHARDS in its environment)."""
    manager = Workers(cells.settings(count).for_cell(shard))
    proc = manager.start(
        "safe,moderate,dangerous",
        TOOLQ_SHARDS=json.dumps(cells.urls[:count]),
        TOOLQ_SHARD=str(shard),
        TOOLQ_REDIS_URL=cells.urls[shard],
    )
    return manager, proc


def test_one_cell_killed_leaves_the_other_serving(cell_servers: CellServers) -> None:
    cell_servers.start(2)
    settings = cell_servers.settings()
    started = [start_cell_worker(cell_servers, i, 2) for i in range(2)]
    managers = [manager for manager, _ in started]
    try:
        healthy, doomed = run_in(0, 2, "kill"), run_in(1, 2, "kill")
        with Client(registry, settings) as client:
            first = client.dispatch(echo("before"), run_id=doomed).call_ids[0]
            assert client.wait([first], timeout=20)[0].status is CallStatus.SUCCEEDED
            parked = client.dispatch(wipe("kept"), run_id=healthy).call_ids[0]
            stranded = client.dispatch(wipe("stranded"), run_id=doomed)  # parked in cell 1
            cell_servers.kill9(1)
            # A request already past the cell's check rides out the Redis client's retries
            # (~15 s) before it fails; one that comes after the check's trust window is over
            # is refused at once. This test is about the second kind.
            time.sleep(FRESH_SECONDS)
            # The healthy cell's runs go on: dispatched, run by the real --shard 0 worker.
            batch = client.dispatch(echo("after"), run_id=healthy)
            assert batch.wait(20)[0].output == {"text": "after"}
            # New runs under fresh ids all start, in the cell that answers, whatever their home.
            fresh = [client.dispatch(echo(f"new run {i}")) for i in range(20)]
            assert {home_cell(b.run_id, 2) for b in fresh} == {0, 1}
            for batch in fresh:
                assert batch.wait(20)[0].status is CallStatus.SUCCEEDED
                assert client.cells is not None
                assert client.cells.for_run(batch.run_id).index == 0
            # The lost cell's run fails at once, naming the cell.
            with pytest.raises(CellUnavailableError) as lost:
                client.dispatch(echo("lost"), run_id=doomed)
            assert lost.value.code == "cell_unavailable" and lost.value.details["cell"] == 1
            assert "cell 1" in lost.value.message
            with pytest.raises(CellUnavailableError):
                client.results(doomed)
            # A batch of that cell fails as its client does: waiting, reading, following.
            with pytest.raises(CellUnavailableError):
                stranded.wait(5)
            with pytest.raises(CellUnavailableError):
                stranded.results()
            with pytest.raises(CellUnavailableError):
                next(stranded.events(follow=True, timeout=5))
            with pytest.raises(CellUnavailableError):
                next(client.events(doomed, follow=True, timeout=5))
            with pytest.raises(CellUnavailableError):
                Client(registry, settings).result(first)  # not remembered: probed, cell down
            # Listings: what the healthy cell has.
            assert [p.call_id for p in client.approvals.pending()] == [parked]
        for api in serve(create_app(settings, registry, tokens=TOKENS)):
            got = httpx.post(f"{api}/v1/runs/{doomed}/calls", json=echo("x"), headers=h("admin-t"))
            assert got.status_code == 503
            assert got.json()["error"]["code"] == "cell_unavailable"
            assert "cell 1" in got.json()["error"]["message"]
            assert httpx.get(f"{api}/v1/calls/{first}", headers=h("admin-t")).status_code == 503
            ok = httpx.post(f"{api}/v1/runs/{healthy}/calls", json=echo("y"), headers=h("admin-t"))
            assert ok.status_code == 202
            pending = httpx.get(f"{api}/v1/approvals", headers=h("alice-t"))
            assert pending.status_code == 200
            assert [p["call_id"] for p in pending.json()] == [parked]
            assert pending.headers["x-toolq-cells-down"] == "1"
            overview = httpx.get(f"{api}/v1/overview", headers=h("admin-t"))
            assert overview.status_code == 200
            assert [c["up"] for c in overview.json()["cells"]] == [True, False]
            assert overview.json()["pending_approvals"] == 1
            metrics = httpx.get(f"{api}/metrics", headers=h("admin-t"))
            assert metrics.status_code == 200
            assert 'toolq_cell_up{shard="1"} 0' in metrics.text
            assert 'toolq_cell_up{shard="0"} 1' in metrics.text
            assert 'shard="1",risk' not in metrics.text
            health = httpx.get(f"{api}/healthz")
            assert health.status_code == 200 and health.json()["status"] == "degraded"
            assert httpx.get(f"{api}/v1/charts", headers=h("admin-t")).status_code == 200
    finally:
        doomed_worker, proc = started[1]
        if proc.poll() is None:  # type: ignore[attr-defined]
            doomed_worker.kill9(proc)  # type: ignore[arg-type]  # its Redis is gone
        for manager in managers:
            manager.stop_all()


def test_cli_worker_and_approvals_with_cells(cell_servers: CellServers) -> None:
    cell_servers.start(2)
    settings = cell_servers.settings()
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "TOOLQ_SHARDS": json.dumps(cell_servers.urls),
        "TOOLQ_SECRETS_KEY": SECRETS_KEY,
        "TOOLQ_APP": "tests.apps:registry",
    }

    def toolq(*argv: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "toolq", *argv],
            env={**env, **extra},
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )

    refused = toolq("worker", "--risk", "safe")
    assert refused.returncode != 0 and "--shard" in refused.stderr
    beyond = toolq("worker", "--risk", "safe", "--shard", "2")
    assert beyond.returncode != 0 and "lists 2 cells" in beyond.stderr
    runs = [run_in(0, 2, "cli"), run_in(1, 2, "cli")]
    with Client(registry, settings) as client:
        parked = [client.dispatch(wipe(r), run_id=r).call_ids[0] for r in runs]
    listed = toolq("approvals", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert sorted(p["call_id"] for p in json.loads(listed.stdout)) == sorted(parked)
    shown = toolq("approvals", "show", parked[1][:10], "--json")
    assert shown.returncode == 0 and json.loads(shown.stdout)["call_id"] == parked[1]
    tailed = toolq("tail", runs[1], "--json")
    assert tailed.returncode == 0 and parked[1] in tailed.stdout
    cell_servers.kill9(0)
    listed = toolq("approvals", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [p["call_id"] for p in json.loads(listed.stdout)] == [parked[1]]
    assert "cell 0" in listed.stderr and "does not answer" in listed.stderr
    lost = toolq(
        "approvals",
        "approve",
        parked[0],
        "--by",
        "alice",
        TOOLQ_APPROVAL_SIGNING_KEY=generate_pair()[0],
    )
    assert lost.returncode != 0 and "cell 0" in lost.stderr
    decided = toolq("approvals", "deny", parked[1], "--reason", "no", "--by", "alice")
    assert decided.returncode == 0, decided.stderr
    with Client(registry, settings) as client:
        assert client.cell_clients[1].result(parked[1]).status is CallStatus.DENIED


def test_risk_levels_route_per_cell_queue(two: Settings, cell_servers: CellServers) -> None:
    """A cell's messages go to that cell's own queues (its workers' broker)."""
    with Client(registry, two) as client:
        runs = [run_in(0, 2, "q"), run_in(1, 2, "q")]
        for run in runs:
            client.dispatch([{"id": "a", "name": "add", "arguments": {"a": 1, "b": 2}}], run_id=run)
    for url in cell_servers.urls:
        queue = redis.Redis.from_url(url)
        try:
            assert queue.llen(f"toolq.{RiskLevel.MODERATE.value}") == 1
        finally:
            queue.close()


def test_a_draining_cell_takes_no_new_runs_and_keeps_serving_its_own(
    cell_servers: CellServers,
) -> None:
    cell_servers.start(2)
    old = run_in(1, 2, "drain")
    with Client(registry, cell_servers.settings()) as before:
        parked = before.dispatch(wipe("old"), run_id=old).call_ids[0]
    draining = make_settings(
        shards=[cell_servers.urls[0], {"url": cell_servers.urls[1], "draining": True}]
    )
    workers = [TestWorker(draining.for_cell(i), registry) for i in range(2)]
    for worker in workers:
        worker.start(1)
    try:
        with Client(registry, draining) as client:
            fresh = [client.dispatch(echo(f"n{i}")) for i in range(12)]
            named = [
                client.dispatch(echo("named"), run_id=run_in(1, 2, f"nd{i}")) for i in range(3)
            ]
            for batch in [*fresh, *named]:  # every new run in cell 0, even ids homed in 1
                assert batch.wait(20)[0].status is CallStatus.SUCCEEDED
                assert run_keys(cell_servers.urls[0], batch.run_id) == 2
                assert run_keys(cell_servers.urls[1], batch.run_id) == 0
            # The draining cell's own run goes on there: decided, run, and joined by new calls.
            assert [p.call_id for p in client.approvals.pending()] == [parked]
            client.approvals.approve(parked, "alice")
            assert client.wait([parked], timeout=20)[0].output == "wiped old"
            assert client.dispatch(echo("more"), run_id=old).wait(20)[0].output == {"text": "more"}
            assert len(client.results(old)) == 2 and run_keys(cell_servers.urls[0], old) == 0
    finally:
        for worker in workers:
            worker.close()
    with pytest.raises(ValueError, match="every cell"):
        make_settings(shards=[{"url": cell_servers.urls[0], "draining": True}])


def test_verify_audit_checks_every_cells_stream(cell_servers: CellServers) -> None:
    from toolq.signing import generate_pair

    cell_servers.start(2)
    signing, verify = generate_pair()
    runs = [run_in(0, 2, "audit"), run_in(1, 2, "audit")]
    with Client(registry, cell_servers.settings()) as client:
        parked = [client.dispatch(wipe(r), run_id=r).call_ids[0] for r in runs]
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "TOOLQ_SHARDS": json.dumps(cell_servers.urls),
        "TOOLQ_SECRETS_KEY": SECRETS_KEY,
        "TOOLQ_APPROVAL_SIGNING_KEY": signing,
        "TOOLQ_APPROVAL_VERIFY_KEYS": verify,
    }

    def toolq(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "toolq", *argv],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )

    for call_id in parked:
        denied = toolq("approvals", "deny", call_id, "--reason", "no", "--by", "alice")
        assert denied.returncode == 0, denied.stderr
    report = toolq("approvals", "verify-audit", "--json")
    assert report.returncode == 0, report.stderr
    counts = json.loads(report.stdout)
    assert counts["valid"] == 2 and counts["invalid"] == 0  # one signed denial in each cell
    # A forged entry in the second cell's stream is found too.
    forged = redis.Redis.from_url(cell_servers.urls[1])
    try:
        [(_, fields)] = forged.xrange("toolq:audit")
        forged.xadd("toolq:audit", {**fields, b"outcome": b"approved"})  # was: denied
    finally:
        forged.close()
    report = toolq("approvals", "verify-audit", "--json")
    counts = json.loads(report.stdout)
    assert report.returncode == 1 and counts["invalid"] == 1
    # Each cell's stream is its own chain: the altered copy reuses cell 1's seq 1.
    chains = {c["source"]: c["problems"] for c in counts["chains"]}
    assert chains["cell 0"] == []
    assert [(p["kind"], p["seq"]) for p in chains["cell 1"]] == [("altered", 1), ("forged", 1)]
