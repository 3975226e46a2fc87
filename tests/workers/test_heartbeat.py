"""Heartbeats: what ``Maintenance`` writes is what ``toolq check`` and the API read."""

from __future__ import annotations

import redis

from toolq import RiskLevel, Settings
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
