"""An archiver killed -9 mid-batch loses and duplicates nothing (real processes, real kills)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time

from tests.apps import registry
from tests.conftest import ROOT, make_settings
from toolq import Client
from toolq.history.store import HistoryStore
from toolq.keys import HISTORY_GROUP, Keys
from toolq.testing import TestWorker

CALLS = 1500


def archiver(settings, url: str) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "TOOLQ_REDIS_URL": settings.redis_url,
        "TOOLQ_HISTORY_URL": url,
        "TOOLQ_HISTORY_BATCH": "400",
        "TOOLQ_HISTORY_CLAIM_AFTER": "0.2",
    }
    return subprocess.Popen(
        [sys.executable, "-m", "toolq", "history", "archive"],
        env=env,
        cwd=ROOT,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def taken_by(r, keys: Keys, pid: int) -> int:
    """Archive entries the archiver of process ``pid`` has taken and not acknowledged."""
    consumers = r.xpending(keys.history_archive, HISTORY_GROUP)["consumers"]
    return sum(c["pending"] for c in consumers if c["name"].decode().endswith(f":{pid}"))


def sql_calls(url: str) -> int:
    history = HistoryStore(url)
    try:
        return history.counts()["history_calls"]
    finally:
        history.close()


def finished_calls(settings) -> tuple[list[str], list[str]]:
    """Calls made final in every way the archive sees: at creation, by a worker, denied."""
    with Client(registry, settings) as client:
        failed = client.dispatch(
            [{"id": f"u{i}", "name": "no_such_tool", "arguments": {}} for i in range(CALLS)],
            run_id="run-failed",
        )
        ran = client.dispatch(
            [{"id": f"e{i}", "name": "echo", "arguments": {"text": str(i)}} for i in range(100)],
            run_id="run-ran",
        )
        with TestWorker(settings, registry) as worker:
            worker.drain()
        parked = client.dispatch(
            [{"id": f"w{i}", "name": "wipe", "arguments": {"target": "/tmp/x"}} for i in range(20)],
            run_id="run-denied",
            principal="agent",
        )
        for call_id in parked.call_ids:
            client.approvals.deny(call_id, "alice", "no")
        ran.wait(timeout=30)
        return failed.call_ids + ran.call_ids + parked.call_ids, [
            "run-failed",
            "run-ran",
            "run-denied",
        ]


def test_an_archiver_killed_mid_batch_again_and_again_archives_each_call_exactly_once(
    r, history_url
):
    url = history_url
    settings = make_settings(history_url=url, hot_seconds=3600)
    keys = Keys(settings.key_prefix)
    call_ids, runs = finished_calls(settings)
    assert r.xlen(keys.history_archive) == len(call_ids)
    # What Redis holds, to compare the history store with once all is archived.
    events = {
        run: [
            (eid.decode(), {k.decode(): v.decode() for k, v in f.items()})
            for eid, f in r.xrange(keys.run_stream(run))
        ]
        for run in runs
    }
    audit = [
        (eid.decode(), {k.decode(): v.decode() for k, v in f.items()})
        for eid, f in r.xrange(keys.audit_stream)
    ]
    assert len(audit) >= 20

    rng = random.Random(7)
    killed_with_pending = 0
    for _ in range(6):
        proc = archiver(settings, url)
        # Kill it once it has taken a batch (startup is slow on a busy machine), a little
        # after, at a random moment of the batch: before, during or after its transaction.
        # Within 0.6 s: a quiet machine archives all of them in under one second (a
        # kill up to 2.5 s later found nothing left to interrupt).
        before = r.xlen(keys.history_archive)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (
            taken_by(r, keys, proc.pid) or r.xlen(keys.history_archive) < before
        ):
            time.sleep(0.005)
        time.sleep(rng.uniform(0.0, 0.6))
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        pending = r.xpending(keys.history_archive, HISTORY_GROUP)["pending"]
        killed_with_pending += bool(pending)
        print(
            f"killed: {r.xlen(keys.history_archive)} waiting, {pending} taken, "
            f"{sql_calls(url)} calls in SQL"
        )
        if not r.xlen(keys.history_archive):
            break
    # The last kills left batches taken and unwritten (or written, not acknowledged).
    assert killed_with_pending >= 1
    proc = archiver(settings, url)
    deadline = time.monotonic() + 60
    while r.xlen(keys.history_archive) and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(timeout=10)
    assert r.xlen(keys.history_archive) == 0
    assert r.xpending(keys.history_archive, HISTORY_GROUP)["pending"] == 0

    history = HistoryStore(url)
    try:
        counts = history.counts()
        assert counts["history_calls"] == len(call_ids)
        assert set(history.records(call_ids)) == set(call_ids)
        assert counts["history_events"] == sum(len(e) for e in events.values())
        for run, entries in events.items():
            assert history.events(run) == [
                (eid, {**f, "ts": repr(float(f["ts"]))}) for eid, f in entries
            ]
        assert counts["history_decisions"] == 20
        assert list(history.audit_entries()) == audit
        assert history.run_call_ids("run-failed") == call_ids[:CALLS]
    finally:
        history.close()
    # Each archived record is the one Redis held.
    for call_id in (call_ids[0], call_ids[CALLS], call_ids[-1]):
        held = {k.decode(): v.decode() for k, v in r.hgetall(keys.call(call_id)).items()}
        stored = HistoryStore(url).record(call_id)
        assert stored == held, json.dumps([stored, held])[:500]
