"""The recent-calls page lists one dispatch's calls in dispatch order (newest first).

A dispatch's calls share one creation time; Redis alone would order them by call id.
"""

from __future__ import annotations

import pytest

from toolq.api import dashboard
from toolq.api.dashboard import overview

pytestmark = pytest.mark.e2e


def test_calls_of_one_dispatch_are_listed_in_dispatch_order(client, monkeypatch):
    first = client.dispatch([{"id": "x", "name": "echo", "arguments": {"text": "x"}}], run_id="a")
    batch = client.dispatch(
        [{"id": f"c{i}", "name": "echo", "arguments": {"text": str(i)}} for i in range(40)],
        run_id="b",
    )
    later = client.dispatch([{"id": "y", "name": "echo", "arguments": {"text": "y"}}], run_id="c")
    newest_first = [*later.call_ids, *reversed(batch.call_ids), *first.call_ids]
    assert sorted(batch.call_ids) != batch.call_ids  # ids alone would not give this order
    assert [c["call_id"] for c in overview(client, limit=100)["calls"]] == newest_first
    # a dispatch is never split across the chunks the index is read in
    monkeypatch.setattr(dashboard, "SCAN_CHUNK", 7)
    assert [c["call_id"] for c in overview(client, limit=100)["calls"]] == newest_first
    pages = [overview(client, offset=n, limit=9)["calls"] for n in range(0, 42, 9)]
    assert [c["call_id"] for page in pages for c in page] == newest_first
