"""Cells with a history store: a call read by id after it left its cell's Redis.

A process that has not seen a call looks for its id in each cell's Redis; once the call's
hot window ended it is in the history store only (one SQL database for every cell), and a
client, an API replica or the CLI that never saw it must still read the final state other
clients saw, as without cells.
"""

from __future__ import annotations

import time

from tests.apps import registry
from toolq import Client
from toolq.history.archiver import Archiver
from toolq.history.store import HistoryStore


def test_an_archived_call_is_read_by_id_by_a_process_that_never_saw_it(cell_servers, tmp_path):
    cell_servers.start(2)
    settings = cell_servers.settings(history_url=f"sqlite:///{tmp_path}/h.db", hot_seconds=1)
    with Client(registry, settings) as client:
        batch = client.dispatch(
            [{"id": "u1", "name": "no_such_tool", "arguments": {}}], run_id="r-cold"
        )
        [call_id] = batch.call_ids
        seen = client.result(call_id)
        assert seen.status.value == "failed"
        cell = client.cell_for_call(call_id)
        history = HistoryStore(settings.history_url)
        try:
            archiver = Archiver(cell.redis, cell.keys, cell.settings, history, "a1")
            assert archiver.step(100) == 1
        finally:
            history.close()
        assert client.result(call_id).status.value == "failed"  # remembered: its cell's history
    time.sleep(1.3)  # the hot window ends: the call is in the history store only
    with Client(registry, settings) as other:  # an API replica, a restarted process
        assert other.result(call_id).status.value == "failed"
