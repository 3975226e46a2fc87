"""The history store itself: schema upgrades, retention, audit order."""

from __future__ import annotations

import multiprocessing
import time

from toolq.history.store import Batch, HistoryStore


def _open(url: str) -> None:
    HistoryStore(url, upgrade=True).close()


def test_processes_opening_a_new_store_at_once_all_find_it_upgraded(tmp_path):
    # toolq dev starts three workers and the API together, each upgrading the same store.
    for url in (f"sqlite:///{tmp_path}/a.db", f"sqlite:///{tmp_path}/b.db"):
        procs = [multiprocessing.Process(target=_open, args=(url,)) for _ in range(4)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
        assert [p.exitcode for p in procs] == [0, 0, 0, 0]
        store = HistoryStore(url)
        assert store.counts()["history_calls"] == 0
        store.close()


def record(call_id: str, tenant: str, finished: float) -> dict[str, str]:
    envelope = (
        f'{{"call_id":"{call_id}","tool_call_id":"t","name":"echo","arguments":{{}},'
        f'"run_id":"r","tenant":"{tenant}"}}'
    )
    return {
        "call_id": call_id,
        "position": "0",
        "run_id": "r",
        "status": "succeeded",
        "name": "echo",
        "tenant": tenant,
        "envelope": envelope,
        "created_at": repr(finished),
        "finished_at": repr(finished),
        "decided_by": "alice",
        "updated_at": repr(finished),
    }


def test_retention_deletes_each_kind_past_its_days_and_per_tenant_overrides(history_url):
    store = HistoryStore(history_url)
    now = time.time()
    day = 86400
    old, recent = now - 40 * day, now - 5 * day
    store.write(
        Batch(
            calls=[
                record("old-default", "default", old),
                record("new-default", "default", recent),
                record("old-acme", "acme", old),
                record("new-acme", "acme", recent),
            ],
            events=[
                (
                    "r",
                    f"{int(old * 1000)}-0",
                    {
                        "type": "call.succeeded",
                        "call_id": "old-default",
                        "ts": repr(old),
                        "data": "{}",
                    },
                ),
                (
                    "r",
                    f"{int(recent * 1000)}-0",
                    {
                        "type": "call.succeeded",
                        "call_id": "new-acme",
                        "ts": repr(recent),
                        "data": "{}",
                    },
                ),
            ],
            audit=[
                (f"{int(old * 1000)}-0", {"outcome": "denied", "seq": "1", "hash": "h1"}),
                (f"{int(recent * 1000)}-0", {"outcome": "approved", "seq": "2", "prev": "h1"}),
            ],
        )
    )
    assert store.prune({}) == {"results": 0, "events": 0, "audit": 0}  # nothing configured
    # results kept 30 days by default, acme's 3 days; events 30 days; audit 30 days
    deleted = store.prune(
        {"results": 30, "events": 30, "audit": 30}, {"acme": {"results": 3}}, now=now
    )
    assert deleted == {"results": 3, "events": 1, "audit": 1}
    assert set(store.records(["old-default", "new-default", "old-acme", "new-acme"])) == {
        "new-default"
    }
    assert [sid for sid, _ in store.audit_entries()] == [f"{int(recent * 1000)}-0"]
    assert next(iter(store.audit_entries()))[1] == {"outcome": "approved", "seq": "2", "prev": "h1"}
    store.close()


def test_audit_entries_come_in_stream_order_after_a_given_id(history_url):
    store = HistoryStore(history_url)
    ids = ["9-0", "10-0", "10-2", "100-1"]  # numeric order, not text order
    store.write(Batch(audit=[(i, {"n": i}) for i in ids]))
    assert [i for i, _ in store.audit_entries()] == ids
    assert [i for i, _ in store.audit_entries(after="10-0")] == ["10-2", "100-1"]
    assert store.audit_mark() == "100-1"
    store.close()


def test_archivers_apply_retention_once_an_hour_between_them(r, history_url):
    from tests.conftest import make_settings
    from toolq.history.archiver import Archiver
    from toolq.keys import Keys

    settings = make_settings(history_url=history_url, history_retention={"results": 30})
    store = HistoryStore(history_url)
    old = time.time() - 40 * 86400
    store.write(Batch(calls=[record("old", "default", old), record("new", "default", time.time())]))
    first = Archiver(r, Keys(), settings, store, "a1")
    second = Archiver(r, Keys(), settings, store, "a2")
    assert first.prune_if_due() == {"results": 1, "events": 0, "audit": 0}
    assert second.prune_if_due() is None  # the first one holds the hour
    assert set(store.records(["old", "new"])) == {"new"}
    store.close()


def test_the_cli_upgrades_a_new_postgresql_store_then_reports_and_prunes_it(r, postgres):
    import json
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT, make_settings

    url = postgres.create()  # empty: no tables yet
    env = {
        **os.environ,
        "TOOLQ_REDIS_URL": make_settings().redis_url,
        "TOOLQ_HISTORY_URL": url,
        "TOOLQ_HISTORY_RETENTION": '{"audit": 1}',
    }

    def toolq(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "toolq", "history", *args],
            capture_output=True, text=True, env=env, cwd=ROOT, timeout=120,
        )  # fmt: skip

    upgraded = toolq("upgrade")
    assert upgraded.returncode == 0, upgraded.stderr
    assert toolq("upgrade").returncode == 0  # again: nothing to do
    store = HistoryStore(url)
    store.write(Batch(audit=[("1000-0", {"outcome": "denied"})]))  # from 1970
    store.close()
    status = toolq("status")
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["history_audit"] == 1
    pruned = toolq("prune")
    assert json.loads(pruned.stdout) == {"results": 0, "events": 0, "audit": 1}


def test_a_batch_larger_than_one_statement_is_written_whole_and_twice_is_once(history_url):
    store = HistoryStore(history_url)
    now = time.time()
    batch = Batch(calls=[record(f"c{i}", "default", now) for i in range(1200)])
    store.write(batch)
    store.write(batch)  # a batch written again (its archiver died before acknowledging)
    counts = store.counts()
    assert counts["history_calls"] == 1200 and counts["history_decisions"] == 1200
    store.close()
