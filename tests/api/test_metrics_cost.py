"""``/metrics`` counts parked calls from their indexes: the same figures, fewer reads."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest

from tests.api.conftest import TOKENS, h
from tests.api.test_approval_pages import park
from tests.conftest import make_settings, serve
from toolq import Client
from toolq.api.app import create_app
from toolq.dispatch.tenants import calls_by_tenant
from toolq.quotas import DEFAULT_TENANT, OTHER_TENANTS

pytestmark = pytest.mark.e2e


@pytest.fixture
def tenanted(r) -> Iterator[tuple[str, Client]]:
    from tests.apps import registry

    settings = make_settings(tenants={"acme": {"weight": 2}})
    with Client(registry, settings) as client:
        yield from ((url, client) for url in serve(create_app(settings, registry, tokens=TOKENS)))


def hmgets(r) -> int:
    return int(r.info("commandstats").get("cmdstat_hmget", {}).get("calls", 0))


def test_parked_calls_are_counted_per_tenant_without_reading_each(tenanted, r):
    url, client = tenanted
    park(client, 40, run_id="m-default")
    park(client, 30, run_id="m-acme", tenant="acme")
    park(client, 20, run_id="m-walkin", tenant="walkin")
    client.approvals.deny(park(client, 1, run_id="m-acme", tenant="acme")[0], "alice")
    queued = client.dispatch(
        [{"id": "q", "name": "echo", "arguments": {"text": "x"}}], run_id="m-q", principal="agent"
    )
    # the figures the call-by-call count gives (the reading /metrics made before)
    scanned = calls_by_tenant(client)
    assert (
        scanned[DEFAULT_TENANT].awaiting_approval == 40 and scanned["acme"].awaiting_approval == 30
    )
    before = hmgets(r)
    got = httpx.get(f"{url}/metrics", headers=h("admin-t"))
    reads = hmgets(r) - before
    assert got.status_code == 200, got.text
    figures = dict(
        re.findall(r'^toolq_tenant_calls\{(tenant="[^"]+",state="\w+")\} (\d+)$', got.text, re.M)
    )
    expected = {
        (DEFAULT_TENANT, "awaiting_approval"): 40,
        ("acme", "awaiting_approval"): 30,
        (OTHER_TENANTS, "awaiting_approval"): 20,
        (DEFAULT_TENANT, "queued"): 1,
        ("acme", "queued"): 0,
        (OTHER_TENANTS, "running"): 0,
    }
    for (tenant, state), value in expected.items():
        assert figures[f'tenant="{tenant}",state="{state}"'] == str(value), (tenant, state)
    assert queued.calls[0].status.value == "queued"
    assert "toolq_pending_approvals 90" in got.text.splitlines()
    # The recent-calls figures read each of the 92 recent calls once; the tenant counts no
    # parked call (the call-by-call count read all 90 of them again).
    assert reads <= 92 + 5, reads
