"""Ids and names holding a NUL character, which PostgreSQL's text cannot hold: archived with
the other calls, and read as unknown from the history store (no request gets a 500)."""

from __future__ import annotations

import httpx
import pytest

from tests.api.conftest import TOKENS, h
from tests.apps import registry
from tests.conftest import make_settings, serve
from toolq import Client
from toolq.api.app import create_app
from toolq.errors import RunNotFoundError
from toolq.history.archiver import Archiver
from toolq.history.store import HistoryStore
from toolq.keys import Keys
from toolq.testing import TestWorker


def test_a_nul_in_a_name_finds_nothing_archived(r, history_url):
    settings = make_settings(history_url=history_url)
    with Client(registry, settings) as client:
        # No new run takes such an id now; one an earlier release or a Redis writer made
        # exists (its owner key), and keeps working.
        client.owners.claim("r\x00n", None)
        sent = client.dispatch(
            [{"id": "a", "name": "echo", "arguments": {"text": "x"}}], run_id="r\x00n"
        )
        assert client.runs(tenant="t\x00n").items == []
        assert client.run("r\x00n").calls == 1
        with pytest.raises(RunNotFoundError):
            client.run("s\x00n")
        assert client.store.statuses(["c\x00n", sent.call_ids[0]])[0] is None
    for api in serve(create_app(settings, registry, tokens=TOKENS)):
        for path, params in [
            ("/v1/runs", {"tenant": "t\x00n"}),
            ("/v1/runs/r%00x", {}),
            ("/v1/calls/c%00x", {}),
            ("/v1/runs/r%00x/events", {"follow": "false"}),
        ]:
            got = httpx.get(f"{api}{path}", params=params, headers=h("view-t"))
            assert got.status_code < 500, (path, got.status_code, got.text)


def test_a_call_with_a_nul_in_its_names_is_archived_with_the_others(r, history_url):
    """Any Redis client can write one: it must not stop the archive of every call."""
    settings = make_settings(history_url=history_url)
    with Client(registry, settings) as client:
        client.owners.claim("r\x00n", "p\x00")  # as an earlier release made it
        odd = client.dispatch(
            [{"id": "a\x00", "name": "echo", "arguments": {"text": "x"}}],
            run_id="r\x00n",
            principal="p\x00",
        )
        plain = client.dispatch([{"id": "a", "name": "echo", "arguments": {"text": "y"}}])
        with TestWorker(settings, registry) as worker:
            worker.drain()
        odd.wait(timeout=5)
        plain.wait(timeout=5)
        history = HistoryStore(settings.history_url)
        try:
            assert Archiver(r, Keys(settings.key_prefix), settings, history, "t").step(100) == 2
            assert history.record(plain.call_ids[0]) is not None
            kept = history.record(odd.call_ids[0])
            assert kept is not None and kept["run_id"] == "r\x00n"  # the record as it was
        finally:
            history.close()


def test_a_history_search_naming_a_nul_finds_nothing(r, history_url):
    settings = make_settings(history_url=history_url)
    for api in serve(create_app(settings, registry, tokens=TOKENS)):
        for params in [{"tool": "t\x00n"}, {"run": "r\x00n"}, {"error": "e\x00"}]:
            got = httpx.get(f"{api}/v1/history/calls", params=params, headers=h("view-t"))
            assert got.status_code == 200 and got.json() == [], (params, got.text)
