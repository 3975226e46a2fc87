"""A run id names Redis keys and history rows: one over 256 characters is a 400, nothing kept."""

from __future__ import annotations

from urllib.parse import quote

import httpx
import pytest

from tests.api.conftest import h
from toolq.errors import PayloadError
from toolq.results.owners import MAX_RUN_ID_CHARS

pytestmark = pytest.mark.e2e

CALL = [{"id": "c1", "name": "echo", "arguments": {"text": "x"}}]


def test_an_overlong_run_id_is_refused_before_anything_is_written(api, client, r):
    before = r.dbsize()
    long_id = "r" * 5000
    got = httpx.post(f"{api}/v1/runs/{long_id}/calls", json=CALL, headers=h("agent-t"))
    assert got.status_code == 400, got.text
    error = got.json()["error"]
    assert error["code"] == "invalid_payload" and "at most 256 characters" in error["message"]
    with pytest.raises(PayloadError):
        client.dispatch(CALL, run_id="r" * (MAX_RUN_ID_CHARS + 1), principal="agent")
    assert r.dbsize() == before
    # the longest allowed id works
    ok = httpx.post(
        f"{api}/v1/runs/{'r' * MAX_RUN_ID_CHARS}/calls", json=CALL, headers=h("agent-t")
    )
    assert ok.status_code == 202, ok.text


@pytest.mark.parametrize("control", ["\n", "\x00", "\r", "\x1b", "\x85", "\u202e", "\u200b"])
def test_a_new_run_id_with_a_control_character_is_refused(api, client, r, control):
    # a newline in a run id forged lines of logs and of `toolq tail`
    before = r.dbsize()
    run_id = f"run{control}forged"
    with pytest.raises(PayloadError, match="control or format characters"):
        client.dispatch(CALL, run_id=run_id, principal="agent")
    got = httpx.post(
        f"{api}/v1/runs/{quote(run_id, safe='')}/calls",
        json=CALL,
        headers=h("agent-t"),
    )
    assert got.status_code == 400, got.text
    assert "control or format characters" in got.json()["error"]["message"]
    assert r.dbsize() == before


def test_a_run_id_spelt_with_joiners_is_a_run_id(client):
    # ZWNJ spells Persian words (U+200C), ZWJ emoji sequences (U+200D): not refused.
    for run_id in (
        "\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645",
        "dev-\U0001f469\u200d\U0001f4bb",
    ):
        batch = client.dispatch(CALL, run_id=run_id, principal="agent")
        assert batch.run_id == run_id
