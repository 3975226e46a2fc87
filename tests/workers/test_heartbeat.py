"""Heartbeats: what ``Maintenance`` writes is what ``toolq check`` and the API read."""

from __future__ import annotations

import redis

from toolq import Client, RiskLevel, Settings
from toolq.api.dashboard import overview
from toolq.api.metrics import render
from toolq.keys import Keys
from toolq.workers.heartbeat import beat, live_workers, missing_queues


def test_a_beat_makes_a_worker_live_for_three_periods(r: redis.Redis, settings: Settings) -> None:
    keys = Keys(settings.key_prefix)
    assert live_workers(settings) == []
    assert missing_queues(settings, [RiskLevel.SAFE]) == ["toolq.safe"]
    beat(r, keys, settings, {"hostname": "w1", "queues": ["toolq.safe"], "pid": 1})
    [worker] = live_workers(settings)
    assert worker["hostname"] == "w1" and worker["queues"] == ["toolq.safe"]
    assert worker["processed"] == 0 and worker["current"] == []  # this process runs no calls
    assert missing_queues(settings, list(RiskLevel)) == ["toolq.moderate", "toolq.dangerous"]
    ttl = r.pttl(keys.worker("w1"))
    assert 0 < ttl <= settings.heartbeat_seconds * 3 * 1000


def test_the_dashboard_and_metrics_read_heartbeats_without_a_new_connection_per_poll(
    r: redis.Redis, settings: Settings, client: Client
) -> None:
    beat(r, Keys(settings.key_prefix), settings, {"hostname": "w1", "queues": ["toolq.safe"]})

    def connections() -> int:
        return int(r.info("stats")["total_connections_received"])

    overview(client), render(client)  # the client's pool connects once
    before = connections()
    for _ in range(5):
        assert overview(client)["workers"]["safe"] == 1
        assert 'toolq_workers_alive{risk="safe"} 1' in render(client)
    assert connections() == before  # a probe client per poll would add 10
