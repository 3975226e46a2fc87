"""The audit stream's hash chain on the suite's Redis: each attack a Redis writer can make
(delete, forge, alter, reorder, cut the tail) is reported by seq and stream id; retention that
trims a prefix is verified from its checkpoint; concurrent writers never fork the chain."""

from __future__ import annotations

import contextlib
import itertools
import json
import re
import threading
import time
from typing import Any

import pytest
import redis

from tests.approvals.conftest import deciding_client
from tests.cli.test_cli import toolq
from toolq.errors import ToolqError
from toolq.keys import Keys
from toolq.results.audit_chain import GENESIS, ChainStart, entry_hash, verify_chain
from toolq.results.audit_log import AuditLog

KEYS = Keys()


def entry(i: int, **extra: str) -> dict[str, str]:
    return {
        "call_id": f"c{i}",
        "run_id": "run1",
        "tool": "wipe",
        "by": "alice",
        "outcome": "approved",
        "digest": "d",
        "ts": f"{1700000000 + i}.5",
        **extra,
    }


@pytest.fixture
def log(r: redis.Redis) -> AuditLog:
    return AuditLog(r, KEYS, maxlen=1_000_000)


def written(log: AuditLog, n: int) -> list[str]:
    return [log.append(entry(i)) for i in range(1, n + 1)]


def expiries(log: AuditLog, n: int) -> list[str]:
    """Entries the sweeper writes (unsigned by design), so signature checks pass."""
    return [log.append(entry(i, by="sweeper", outcome="expired", system="1")) for i in range(n)]


def stored(r: redis.Redis) -> list[tuple[str, dict[bytes, bytes]]]:
    return [(i.decode(), f) for i, f in r.xrange(KEYS.audit_stream)]


def kinds(log: AuditLog) -> list[tuple[str, int | None, str | None]]:
    return [(p.kind, p.seq, p.stream_id) for p in log.verify().problems]


def test_lua_and_python_compute_the_same_hash(r: redis.Redis, log: AuditLog):
    # Names whose byte order differs from a collation's ('_' and capitals), multi-byte text.
    odd = entry(1, a_b="x", ab="y", Z="z", reason="naïve ✓ 東京", empty="")
    log.append(odd)
    log.append(entry(2))
    (_, f1), (_, f2) = [(i, {k.decode(): v.decode() for k, v in f.items()}) for i, f in stored(r)]
    assert (f1["seq"], f1["prev"], f2["seq"], f2["prev"]) == ("1", GENESIS, "2", f1["hash"])
    assert (
        entry_hash(GENESIS, {k: v for k, v in f1.items() if k not in ("prev", "hash")})
        == f1["hash"]
    )
    assert list(f1)[: len(odd)] == list(odd)  # the writer's field order is kept
    report = log.verify()
    assert report.ok and report.entries == 2 and report.head_checked and report.last_seq == 2
    with pytest.raises(redis.ResponseError, match="reserved or repeated"):
        log.append(entry(3, seq="7"))
    assert r.xlen(KEYS.audit_stream) == 2 and log.verify().ok


def test_xdel_is_reported_as_deleted(r: redis.Redis, log: AuditLog):
    ids = written(log, 6)
    r.xdel(KEYS.audit_stream, ids[2], ids[3])
    assert kinds(log) == [("deleted", 3, ids[4])]
    [problem] = log.verify().problems
    assert problem.last_seq == 4


def test_deleting_the_newest_entries_is_caught_by_the_head(r: redis.Redis, log: AuditLog):
    ids = written(log, 4)
    r.xdel(KEYS.audit_stream, ids[-1])
    assert kinds(log) == [("deleted", 4, None)]
    r.xdel(KEYS.audit_stream, *ids[:-1])  # the whole stream
    assert kinds(log) == [("deleted", 1, None)]


def test_forged_entries_are_reported(r: redis.Redis, log: AuditLog):
    written(log, 3)
    (_, first), *_ = stored(r)
    r.xadd(KEYS.audit_stream, entry(9))  # no chain fields
    copy = r.xadd(KEYS.audit_stream, first)  # a replayed entry: its seq is used already
    next_link = {**entry(4), "seq": "4", "prev": "0" * 40}
    forged_next = r.xadd(KEYS.audit_stream, {**next_link, "hash": entry_hash("0" * 40, next_link)})
    problems = log.verify().problems
    found = [(p.kind, p.seq, p.stream_id) for p in problems]
    assert ("forged", None, stored(r)[3][0]) in found
    assert ("forged", 1, copy.decode()) in found
    # a well-hashed link that does not follow seq 3, past the recorded head
    assert ("altered", 3, forged_next.decode()) in found
    assert any(p.kind == "forged" and p.seq == 4 and p.stream_id is None for p in problems)


def test_an_altered_entry_is_reported_with_its_seq(r: redis.Redis, log: AuditLog):
    ids = written(log, 5)
    (_, third) = stored(r)[2]
    r.xdel(KEYS.audit_stream, ids[2])
    readded = r.xadd(KEYS.audit_stream, {**third, b"by": b"mallory"})
    found = kinds(log)
    assert ("altered", 3, readded.decode()) in found
    assert all(kind != "deleted" for kind, _, _ in found)


def test_an_altered_entry_with_a_recomputed_hash_breaks_the_next_link(
    r: redis.Redis, log: AuditLog
):
    ids = written(log, 4)
    tail = stored(r)[2:]
    r.xdel(KEYS.audit_stream, *ids[2:])
    (_, third), (_, fourth) = tail
    fields = {k.decode(): v.decode() for k, v in third.items()}
    fields["by"] = "mallory"
    fields["hash"] = entry_hash(fields["prev"], {k: v for k, v in fields.items() if k != "hash"})
    new3 = r.xadd(KEYS.audit_stream, fields)
    new4 = r.xadd(KEYS.audit_stream, fourth)
    found = kinds(log)
    assert ("altered", 3, new4.decode()) in found  # seq 4's prev is not seq 3's hash
    assert ("altered", 3, new3.decode()) not in found  # its own hash is consistent


def test_reordered_entries_are_reported(r: redis.Redis, log: AuditLog):
    ids = written(log, 6)
    moved = stored(r)[1:3]
    r.xdel(KEYS.audit_stream, ids[1], ids[2])
    again = [r.xadd(KEYS.audit_stream, fields).decode() for _, fields in reversed(moved)]
    assert kinds(log) == [("reordered", 3, again[0]), ("reordered", 2, again[1])]


def test_a_trimmed_prefix_is_verified_from_its_checkpoint(r: redis.Redis):
    log = AuditLog(r, KEYS, maxlen=50)
    archived: list[tuple[str, dict[str, str]]] = []
    for i in range(1, 400):
        log.append(entry(i))
        archived.extend(e for e in log.entries(archived[-1][0] if archived else "-"))
    kept = r.xlen(KEYS.audit_stream)
    assert kept < 399
    report = log.verify()
    assert report.ok and report.from_checkpoint and report.start_seq == 399 - kept + 1
    assert report.entries == kept and report.last_seq == 399
    # An archive of the dropped prefix plugs in ahead of the stream: the whole chain checks.
    stream = list(log.entries())
    older = [e for e in archived if int(e[1]["seq"]) < report.start_seq]
    _, head, _ = log.state()
    whole = verify_chain(itertools.chain(older, stream), None, head, "archive+redis")
    assert whole.ok and whole.entries == 399 and not whole.from_checkpoint
    # Deleting the oldest kept entries is not a trim: the checkpoint names them.
    r.xdel(KEYS.audit_stream, stream[0][0], stream[1][0])
    [problem] = log.verify().problems
    assert (problem.kind, problem.seq, problem.last_seq) == (
        "deleted",
        report.start_seq,
        report.start_seq + 1,
    )
    # An archive that lost an entry is reported too, whatever the source.
    broken = verify_chain(itertools.chain(older[:5], older[6:], stream), ChainStart(), head)
    assert [(p.kind, p.seq) for p in broken.problems] == [("deleted", 6)]


def test_concurrent_python_and_lua_writers_keep_one_chain(pair, r: redis.Redis):
    c = deciding_client(pair, approvers={"alice": ["dangerous"], "bob": ["moderate"]})
    batch = c.dispatch(
        [{"id": f"t{i}", "name": "wipe", "arguments": {"target": str(i)}} for i in range(60)],
        principal="agent",
    )
    ids = batch.call_ids
    log = AuditLog(r, KEYS, maxlen=1_000_000)
    errors: list[BaseException] = []

    def run(fn: Any, *args: Any) -> threading.Thread:
        def body() -> None:
            try:
                fn(*args)
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        return threading.Thread(target=body)

    def decide(chunk: list[tuple[int, str]]) -> None:
        for i, call_id in chunk:
            with contextlib.suppress(ToolqError):
                c.approvals.approve(call_id, by="bob")  # refused: audited in Python
            try:
                if i % 2:
                    c.approvals.approve(call_id, by="alice")  # DECIDE (Lua)
                else:
                    c.approvals.deny(call_id, by="alice", reason="no")
            except ToolqError:
                pass  # expired by the sweeper first

    def sweep() -> None:
        while any(t.is_alive() for t in deciders):
            c.approvals.expire_due(now=1e12)  # EXPIRE (Lua), racing the decisions
        c.approvals.expire_due(now=1e12)

    def python_writer(n: int) -> None:
        for i in range(n):
            log.append(entry(i, by="worker", system="1"))

    decided = list(enumerate(ids))[:40]  # the last 20 are left to the sweeper
    deciders = [run(decide, decided[i::4]) for i in range(4)]
    threads = [*deciders, run(sweep), *[run(python_writer, 50) for _ in range(3)]]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    entries = stored(r)
    seqs = [int(f[b"seq"]) for _, f in entries]
    assert seqs == list(range(1, len(entries) + 1))
    outcomes = {f[b"outcome"] for _, f in entries}
    assert b"expired" in outcomes and (b"approved" in outcomes or b"denied" in outcomes)
    assert len(entries) >= 150 + 60  # the Python writers', a decision or an expiry per call
    report = log.verify()
    assert report.ok and report.entries == len(entries) and report.head_checked
    first, second = c.approvals.audit(count=2)  # what the API and clients read has the chain
    assert (first.seq, first.prev, second.seq, second.prev) == (1, GENESIS, 2, first.hash)
    c.close()


def test_verify_audit_cli_reports_and_exits_1(r: redis.Redis, log: AuditLog, settings):
    ids = written(log, 5)
    for argv in (("verify-audit",), ("approvals", "verify-audit")):
        done = toolq(*argv, "--chain-only", settings=settings)
        assert done.returncode == 0, done.stderr
        assert "intact: 5 entries from seq 1 to seq 5, head matches" in done.stdout
    r.xdel(KEYS.audit_stream, ids[1])
    done = toolq("verify-audit", "--chain-only", settings=settings)
    assert done.returncode == 1
    assert f"deleted: seq 2 at {ids[2]}" in done.stderr
    done = toolq("verify-audit", "--chain-only", "--json", settings=settings)
    report = json.loads(done.stdout)
    assert done.returncode == 1 and report["deleted"] == 1 and not report["signatures_checked"]


def recompute_from(r: redis.Redis, seq: int, change: dict[bytes, bytes]) -> None:
    """What anyone with Redis credentials can do: rewrite entry ``seq`` and recompute the
    chain from there (re-adding every later entry with new links, and the head)."""
    entries = stored(r)
    r.xdel(KEYS.audit_stream, *[i for i, _ in entries[seq - 1 :]])
    prev = entries[seq - 2][1][b"hash"].decode() if seq > 1 else GENESIS
    for n, (_, raw) in enumerate(entries[seq - 1 :], start=seq):
        fields = {
            k.decode(): v.decode() for k, v in {**raw, **(change if n == seq else {})}.items()
        }
        fields["prev"] = prev
        fields["hash"] = prev = entry_hash(prev, {k: v for k, v in fields.items() if k != "hash"})
        r.xadd(KEYS.audit_stream, fields)
    r.hset(KEYS.audit_chain, "hash", prev)


def test_a_recomputed_chain_is_caught_only_by_a_signed_anchor(pair, r: redis.Redis, settings):
    from toolq.approvals.audit import anchor_head, verify_audit
    from toolq.signing import Signer, Verifier

    log = AuditLog(r, KEYS, maxlen=1_000_000)
    expiries(log, 4)
    signer, verifier = Signer.from_text(pair.signing), Verifier.from_text(pair.verify)
    assert anchor_head(log, signer, "ops") is not None  # seq 5 vouches for seq 4
    expiries(log, 2)
    recompute_from(r, 3, {b"digest": b"other"})
    assert log.verify().ok  # the chain alone cannot tell: it was recomputed
    report = verify_audit(r, settings, verifier)
    assert not report.ok and report.altered == 1 and report.unsigned == 0
    [chain] = report.chains
    [problem] = chain.problems
    assert (problem.kind, problem.seq) == ("altered", 4) and "signed anchor" in problem.detail
    # A rewrite after the last anchor is outside what it vouches for, and the report says so.
    expiries(log, 1)
    assert anchor_head(log, signer, "ops") is not None  # seq 9 vouches for seq 8
    assert verify_audit(r, settings, verifier).chains[0].anchored_seq == 8
    recompute_from(r, 9, {b"by": b"mallory"})  # rewrites the anchor itself: its signature fails
    found = verify_audit(r, settings, verifier)
    assert found.invalid == 1 and not found.ok


def test_anchor_audit_cli_signs_the_head(pair, r: redis.Redis, log: AuditLog, settings):
    expiries(log, 3)
    keys = {"TOOLQ_APPROVAL_SIGNING_KEY": pair.signing, "TOOLQ_APPROVAL_VERIFY_KEYS": pair.verify}
    done = toolq("approvals", "anchor-audit", "--by", "ops", settings=settings, **keys)
    assert done.returncode == 0 and "anchored seq 3" in done.stdout, done.stderr
    done = toolq("verify-audit", settings=settings, **keys)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "signed anchor at seq 3 (1 entries after it)" in done.stdout
    done = toolq("approvals", "anchor-audit", settings=settings)
    assert done.returncode == 2 and "TOOLQ_APPROVAL_SIGNING_KEY is not set" in done.stderr


def test_the_api_anchors_the_head_periodically(pair, r: redis.Redis):
    from tests.apps import registry
    from tests.conftest import make_settings, serve
    from toolq.api.app import create_app
    from toolq.approvals.audit import verify_audit
    from toolq.signing import Verifier

    log = AuditLog(r, KEYS, maxlen=1_000_000)
    expiries(log, 3)
    settings = make_settings(approval_signing_key=pair.signing, audit_anchor_interval=0.2)

    def anchors() -> list[dict[bytes, bytes]]:
        return [f for _, f in stored(r) if f[b"outcome"] == b"anchor"]

    for _ in serve(create_app(settings, registry)):
        deadline = time.monotonic() + 10
        while not anchors():
            assert time.monotonic() < deadline, "no anchor"
            time.sleep(0.05)
        time.sleep(1)  # five intervals: nothing new, so no anchor of the anchor
        assert [a[b"digest"].split(b":")[0] for a in anchors()] == [b"3"]
        expiries(log, 1)
        while len(anchors()) < 2:
            assert time.monotonic() < deadline + 10, "no second anchor"
            time.sleep(0.05)
    report = verify_audit(r, settings, Verifier.from_text(pair.verify))
    assert report.ok and report.valid == 2 and report.chains[0].anchored_seq == 5


def test_verifying_while_the_cap_trims_reports_nothing(r: redis.Redis):
    log = AuditLog(r, KEYS, maxlen=20)
    done = threading.Event()

    def write() -> None:
        i = 0
        while not done.is_set():
            i += 1
            log.append(entry(i))

    writer = threading.Thread(target=write)
    writer.start()
    try:
        reports = [log.verify() for _ in range(300)]
    finally:
        done.set()
        writer.join(10)
    assert all(report.ok for report in reports), [r.problems for r in reports if not r.ok][:3]
    assert sum(report.from_checkpoint for report in reports) > 200


def test_lib_audit_is_the_only_place_that_appends_to_the_audit_stream():
    from pathlib import Path

    package = Path(__file__).resolve().parents[2] / "toolq"
    for path in package.rglob("*.lua"):
        text = path.read_text()
        if path.name != "audit.lua" or path.parent.name != "lib":
            assert "'XADD', audit" not in text, path
    for path in package.rglob("*.py"):
        text = path.read_text()
        assert not re.search(r"xadd\(\s*[\w.]*audit", text), path
