"""Pages of parked calls and of runs merged over two cells: one cursor walks both."""

from __future__ import annotations

import time

from tests.apps import registry
from tests.cells.test_cells import run_in, two  # noqa: F401  (the fixture)
from toolq import Client
from toolq.settings import Settings


def test_one_cursor_walks_the_parked_calls_and_runs_of_both_cells(two: Settings) -> None:  # noqa: F811
    runs = [run_in(cell, 2, f"page{n}") for n in range(3) for cell in (0, 1)]
    with Client(registry, two) as client:
        parked = []
        for n, run in enumerate(runs):
            batch = client.dispatch(
                [
                    {"id": f"w{i}", "name": "wipe", "arguments": {"target": f"{n}-{i}"}}
                    for i in range(3)
                ],
                run_id=run,
                principal="agent",
            )
            parked.extend(sorted(batch.call_ids))
            time.sleep(0.002)
        seen: list[str] = []
        cursor = None
        while True:
            page = client.approvals.page(limit=4, cursor=cursor)
            assert page.total == 18
            seen.extend(r.call_id for r in page.items)
            cursor = page.next_cursor
            if cursor is None:
                break
        assert seen == parked  # oldest parked first across both cells, none twice
        listed: list[str] = []
        cursor = None
        while True:
            got = client.runs(limit=4, cursor=cursor)
            listed.extend(s.run_id for s in got.items)
            cursor = got.next_cursor
            if cursor is None:
                break
        assert listed == runs[::-1]  # newest first
        assert client.run(runs[0]).statuses == {"awaiting_approval": 3}
