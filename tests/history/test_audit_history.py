"""The audit chain is checked through the history store: archived entries, then the stream.

Entries are appended through the real AUDIT script, archived by the real archiver and then
trimmed out of Redis, as the stream's length cap does; attacks are made on the SQL rows.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from sqlalchemy import delete, select

from tests.conftest import ROOT, make_settings
from toolq.approvals.audit import verify_audit
from toolq.history.archiver import Archiver
from toolq.history.models import AuditRow
from toolq.history.store import HistoryStore
from toolq.keys import Keys
from toolq.results.audit_log import AuditLog


def entry(n: int) -> dict[str, str]:
    return {
        "call_id": f"c{n}",
        "run_id": "r",
        "tool": "wipe",
        "by": "alice",
        "outcome": "approved",
        "digest": f"d{n}",
        "ts": repr(time.time()),
    }


def archived_then_trimmed(r, history_url: str, first: int, then: int):
    """``first`` entries archived and trimmed from Redis, ``then`` more only in Redis."""
    settings = make_settings(history_url=history_url)
    keys = Keys(settings.key_prefix)
    log = AuditLog(r, keys, settings.audit_maxlen)
    store = HistoryStore(history_url)
    for n in range(first):
        log.append(entry(n))
        if n == first // 2:
            time.sleep(0.01)  # two distinct times, for retention
    Archiver(r, keys, settings, store, "a1").step(100)
    assert [f["seq"] for _, f in store.audit_entries()] == [str(n + 1) for n in range(first)]
    r.xtrim(keys.audit_stream, maxlen=0)  # the cap dropped what was archived
    for n in range(first, first + then):
        log.append(entry(n))
    return settings, store


def test_the_chain_runs_through_history_into_the_stream(r, history_url):
    settings, store = archived_then_trimmed(r, history_url, 8, 3)
    alone = verify_audit(r, settings, None)  # Redis alone: the archived part is missing
    assert not alone.ok
    report = verify_audit(r, settings, None, archived=store.archived_audit())
    assert report.ok, report
    [chain] = report.chains
    assert (chain.entries, chain.start_seq, chain.last_seq) == (11, 1, 11) and chain.head_checked
    store.close()


def test_a_row_deleted_or_altered_in_sql_is_reported(r, history_url):
    settings, store = archived_then_trimmed(r, history_url, 8, 2)
    with store.engine.begin() as conn:
        rows = conn.execute(
            select(AuditRow.stream_id, AuditRow.fields).order_by(AuditRow.ms, AuditRow.seq)
        ).all()
        conn.execute(delete(AuditRow).where(AuditRow.stream_id == rows[3].stream_id))
        altered = rows[5].fields.replace('"alice"', '"mallory"')
        conn.execute(
            AuditRow.__table__.update()
            .where(AuditRow.stream_id == rows[5].stream_id)
            .values(fields=altered)
        )
    [chain] = verify_audit(r, settings, None, archived=store.archived_audit()).chains
    kinds = {(p.kind, p.seq) for p in chain.problems}
    assert ("deleted", 4) in kinds and ("altered", 6) in kinds, chain.problems
    store.close()


def test_retention_leaves_a_checkpoint_and_a_prefix_deleted_past_it_is_reported(r, history_url):
    settings, store = archived_then_trimmed(r, history_url, 8, 2)
    rows = list(store.audit_entries())
    cut_ms = int(rows[5][0].split("-")[0])  # entries before the sixth's millisecond go
    kept_from = next(i for i, (sid, _) in enumerate(rows) if int(sid.split("-")[0]) >= cut_ms)
    now = (cut_ms + 0.5) / 1000 + 86400
    assert store.prune({"audit": 1}, now=now)["audit"] == kept_from
    report = verify_audit(r, settings, None, archived=store.archived_audit())
    [chain] = report.chains
    assert report.ok and chain.from_checkpoint and chain.start_seq == kept_from + 1, chain
    with store.engine.begin() as conn:  # not retention: the oldest kept entry deleted in SQL
        conn.execute(delete(AuditRow).where(AuditRow.stream_id == rows[kept_from][0]))
    [chain] = verify_audit(r, settings, None, archived=store.archived_audit()).chains
    assert ("deleted", kept_from + 1) in {(p.kind, p.seq) for p in chain.problems}
    store.close()


def test_verify_audit_reads_the_history_store_it_is_given(r, history_url):
    settings, store = archived_then_trimmed(r, history_url, 4, 2)
    env = {**os.environ, "TOOLQ_REDIS_URL": settings.redis_url, "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", "toolq", "verify-audit", "--chain-only"]
    without = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
    assert without.returncode == 1 and "deleted" in without.stderr
    env["TOOLQ_HISTORY_URL"] = history_url
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "intact" in done.stdout and "from seq 1" in done.stdout
    store.close()
