"""``/metrics`` shows the archiving lag and ``/healthz`` degrades when it grows too old."""

from __future__ import annotations

import time

import httpx

from tests.api.conftest import TOKENS, h
from tests.apps import registry
from tests.conftest import make_settings, serve
from toolq import Client
from toolq.api.app import create_app
from toolq.history.archiver import Archiver
from toolq.history.store import HistoryStore
from toolq.keys import Keys


def sample(text: str, name: str) -> float:
    [line] = [x for x in text.splitlines() if x.startswith(name + " ")]
    return float(line.split()[1])


def test_an_unarchived_final_call_shows_as_lag_then_degrades_health_until_archived(r, history_url):
    settings = make_settings(history_url=history_url, history_lag_alert=0.5)
    with Client(registry, settings) as client:
        client.dispatch([{"id": "x", "name": "no_such_tool", "arguments": {}}], run_id="r1")
    for api in serve(create_app(settings, registry, tokens=TOKENS)):
        # Requests wait up to 30 s, not httpx's 5: on a loaded machine the first /metrics
        # (PostgreSQL queries included) timed out in the whole-suite run.
        time.sleep(1.0)
        metrics = httpx.get(f"{api}/metrics", headers=h("view-t"), timeout=30).text
        assert sample(metrics, "toolq_history_lag_seconds") >= 1.0
        assert sample(metrics, "toolq_history_unarchived") == 1
        health = httpx.get(f"{api}/healthz", timeout=30).json()
        assert health["status"] == "degraded"
        [check] = [c for c in health["checks"] if c["name"] == "history_lag"]
        assert check["code"] == "history_lag" and "alert at 0.5s" in check["reason"]

        history = HistoryStore(settings.history_url)
        Archiver(r, Keys(), settings, history, "t").step(100)
        history.close()
        metrics = httpx.get(f"{api}/metrics", headers=h("view-t"), timeout=30).text
        assert sample(metrics, "toolq_history_lag_seconds") == 0
        assert sample(metrics, "toolq_history_unarchived") == 0
        health = httpx.get(f"{api}/healthz", timeout=30).json()
        assert [c["ok"] for c in health["checks"] if c["name"] == "history_lag"] == [True]
