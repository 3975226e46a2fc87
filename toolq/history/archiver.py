"""``Archiver``: finished calls from Redis to the history store, exactly once, in batches.

The script that makes a call final also appends it to the archive stream
(``Keys.history_archive``, ``lib/emit.lua``) once the stream exists, and archivers create
it with their consumer group (``HISTORY_GROUP``) before anything else. Each batch read from
the group is written to SQL in one transaction of idempotent upserts (the calls' records,
their events, their decisions, and the audit entries after the last one archived), and only
then acknowledged and deleted from the stream; the calls' Redis keys then get the hot TTL
(``COOL``). A writer killed mid-batch leaves its entries pending: another archiver claims
them after ``Settings.history_claim_after`` (``XAUTOCLAIM``) and writes the batch again,
which the upserts make a no-op for rows already there: nothing is lost, nothing is written
twice. With ``TOOLQ_MIN_REPLICAS_ACK``, what a batch read (records, events, audit entries)
is written to SQL only once the replicas hold it (a fence after the reads:
``ReplicaAcks``; ``ReplicationError`` until then): a call final on a master that dies
before its replicas have it is not archived with a state the failover takes back; its
entries stay pending and are archived once confirmed (claimed again after
``history_claim_after``).

Archivers run in every ``toolq worker`` when ``TOOLQ_HISTORY_URL`` is set (the consumer
group spreads batches over them), or alone as ``toolq history archive``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import redis

from toolq.errors import ReplicationError
from toolq.history.store import Batch, HistoryStore
from toolq.keys import HISTORY_GROUP, Keys
from toolq.quotas import DEFAULT_TENANT
from toolq.results.connection import as_text
from toolq.results.replication import ReplicaAcks
from toolq.results.runner import Scripts
from toolq.results.scripts import COOL
from toolq.settings import Settings

log = logging.getLogger("toolq.history")

EVENT_CHUNK = 500
"""Stream entries read per ``XREVRANGE`` while looking for a batch's events."""
AUDIT_BATCH = 1000
"""Audit entries archived with one batch at most."""
PRUNE_EVERY = 3600.0
"""Seconds between the archivers' retention passes (one archiver at a time)."""


def ensure_group(client: redis.Redis, keys: Keys) -> None:
    """Create the archive stream and its group: from then on every final call is archived."""
    try:
        client.xgroup_create(keys.history_archive, HISTORY_GROUP, id="0", mkstream=True)
    except redis.ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise


def lag_seconds(client: redis.Redis, keys: Keys, now: float | None = None) -> float:
    """Age of the oldest final call not archived yet (0 when none waits).

    The oldest entry of the archive stream: entries leave it once written to SQL.
    """
    first: Any = client.xrange(keys.history_archive, count=1)
    if not first:
        return 0.0
    ms = int(as_text(first[0][0]).partition("-")[0])
    now = time.time() if now is None else now
    return max(0.0, now - ms / 1000)


class Archiver:
    """One consumer of the archive stream, writing to one history store."""

    def __init__(
        self,
        client: redis.Redis,
        keys: Keys,
        settings: Settings,
        history: HistoryStore,
        consumer: str,
    ) -> None:
        self.redis = client
        self.keys = keys
        self.settings = settings
        self.history = history
        self.consumer = consumer
        self.scripts = Scripts(client)
        self.acks = ReplicaAcks(settings, keys)

    def take(self, block_ms: int | None) -> list[tuple[str, dict[str, str]]]:
        """Entries to archive: stale ones of dead archivers first, then new ones."""
        k, count = self.keys, self.settings.history_batch
        idle_ms = int(self.settings.history_claim_after * 1000)
        try:
            stale: Any = self.redis.xautoclaim(
                k.history_archive, HISTORY_GROUP, self.consumer, idle_ms, "0-0", count=count
            )
            entries = list(stale[1])
            if not entries:
                reply: Any = self.redis.xreadgroup(
                    HISTORY_GROUP,
                    self.consumer,
                    {k.history_archive: ">"},
                    count=count,
                    block=block_ms,
                )
                entries = list(reply[0][1]) if reply else []
        except redis.ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            ensure_group(self.redis, self.keys)
            return []
        # An entry deleted while pending comes back without fields: it is acknowledged only.
        return [
            (as_text(entry_id), {as_text(a): as_text(b) for a, b in (fields or {}).items()})
            for entry_id, fields in entries
        ]

    def archive(self, entries: Sequence[tuple[str, dict[str, str]]]) -> int:
        """Write the calls of ``entries`` to SQL, then acknowledge them; how many calls.

        Entries deleted while pending come back empty: they are acknowledged only.
        """
        k = self.keys
        call_ids = list(dict.fromkeys(f["call_id"] for _, f in entries if f.get("call_id")))
        runs = {f["call_id"]: f.get("run_id", "") for _, f in entries if f.get("call_id")}
        pipe = self.redis.pipeline(transaction=False)
        for call_id in call_ids:
            pipe.hgetall(k.call(call_id))
            pipe.lpos(k.run_calls(runs[call_id]), call_id)
        replies = pipe.execute()
        records: list[dict[str, str]] = []
        for call_id, raw, position in zip(call_ids, replies[::2], replies[1::2], strict=True):
            if not raw:  # a record gone already (expired while no archiver ran): nothing left
                continue
            record = {as_text(a): as_text(b) for a, b in raw.items()}
            if not record.get("run_id") or not record.get("envelope"):
                # No call's record (a Redis writer's hash, a stray field): acknowledged like a
                # gone one, or it would fail its whole batch each time the batch is taken.
                log.warning("archive entry for %s names no call record: skipped", call_id)
                continue
            records.append({**record, "call_id": call_id, "position": str(position or 0)})
        idems = self._claims(records)
        by_run: dict[str, list[str]] = defaultdict(list)
        tenants: dict[str, str] = {}
        for record in records:
            by_run[record["run_id"]].append(record["call_id"])
            tenants[record["run_id"]] = record.get("tenant") or DEFAULT_TENANT
        created = {r["call_id"]: r.get("created_at", "") for r in records}
        batch = Batch(calls=records, events=self._events(by_run, created), audit=self._audit())
        self._confirm(len(call_ids))  # else left pending: claimed again after history_claim_after
        self.history.write(batch)
        ids = [entry_id for entry_id, _ in entries]
        if by_run:
            self.scripts.pipelined(
                [
                    COOL(
                        keys=k,
                        run_id=run_id,
                        call_ids=ids_,
                        hot=self.settings.hot_seconds,
                        idempotency=[idems.get(c) for c in ids_],
                        tenant=tenants[run_id],
                    )
                    for run_id, ids_ in by_run.items()
                ]
            )
        if ids:
            pipe = self.redis.pipeline(transaction=True)
            pipe.xack(k.history_archive, HISTORY_GROUP, *ids)
            pipe.xdel(k.history_archive, *ids)
            pipe.execute()
        return len(records)

    def _claims(self, records: list[dict[str, str]]) -> dict[str, str]:
        """Each call's idempotency key, when it still names the call: by call id.

        The key's hash and the fingerprint claimed with it go into the record's row (``idem``,
        ``fingerprint``: added to ``records`` in place), so that a retried dispatch finds the
        call in SQL once the key left Redis; the key then gets the hot TTL with the record
        (``COOL``), never before the row is written.
        """
        named: list[tuple[dict[str, str], str]] = []
        for record in records:
            try:
                env = json.loads(record.get("envelope") or "{}")
            except ValueError:
                continue
            run_id = env.get("run_id") or record.get("run_id", "")
            key = self.keys.idempotency(
                env.get("principal"), run_id, env.get("idempotency_key") or record["call_id"]
            )
            named.append((record, key))
        if not named:
            return {}
        pipe = self.redis.pipeline(transaction=False)
        for _, key in named:
            pipe.get(key)
        out: dict[str, str] = {}
        for (record, key), raw in zip(named, pipe.execute(), strict=True):
            claimed, _, fingerprint = as_text(raw or "").partition(" ")
            if claimed == record["call_id"]:
                record["idem"] = key.rpartition(":")[2]
                record["fingerprint"] = fingerprint
                out[record["call_id"]] = key
        return out

    def _events(
        self, by_run: dict[str, list[str]], created: dict[str, str]
    ) -> list[tuple[str, str, dict[str, str]]]:
        """The events of the batch's calls, read from their runs' streams.

        Each stream is read backwards from its end and only as far as the oldest creation
        event of the batch's calls (its ``ts`` is the record's ``created_at``: the same
        value, written by the same script), so a long run is not read whole for each batch.
        """
        out: list[tuple[str, str, dict[str, str]]] = []
        for run_id, ids in by_run.items():
            wanted, stream = set(ids), self.keys.run_stream(run_id)
            unseen = {c: created.get(c, "") for c in ids}
            found: list[tuple[str, str, dict[str, str]]] = []
            end = "+"
            while unseen:
                entries: Any = self.redis.xrevrange(stream, end, "-", EVENT_CHUNK)
                for entry_id, raw in entries:
                    fields = {as_text(a): as_text(b) for a, b in raw.items()}
                    call_id = fields.get("call_id", "")
                    if call_id in wanted:
                        found.append((run_id, as_text(entry_id), fields))
                        if unseen.get(call_id) == fields.get("ts"):
                            del unseen[call_id]
                if len(entries) < EVENT_CHUNK:
                    break
                end = f"({as_text(entries[-1][0])}"
            out.extend(reversed(found))
        return out

    def _audit(self) -> list[tuple[str, dict[str, str]]]:
        """Audit entries after the last one archived, in stream order."""
        mark = self.history.audit_mark()
        entries: Any = self.redis.xrange(
            self.keys.audit_stream, f"({mark}" if mark else "-", "+", AUDIT_BATCH
        )
        return [
            (as_text(entry_id), {as_text(a): as_text(b) for a, b in raw.items()})
            for entry_id, raw in entries
        ]

    def step(self, block_ms: int | None) -> int:
        """Take one batch and archive it (audit entries too, even with no call); calls archived."""
        entries = self.take(block_ms)
        if entries:
            return self.archive(entries)
        audit = self._audit()
        if audit:
            self._confirm(0)
            self.history.write(Batch(audit=audit))
        return 0

    def _confirm(self, calls: int) -> None:
        """Raise ``ReplicationError`` unless the replicas hold what was read so far.

        ``SET`` of the mark and ``WAIT`` after the reads: the replicas acknowledging the
        mark hold everything the master had applied before it, whatever connection read
        it. Nothing to wait for without replica acks.
        """
        if not self.acks.enabled:
            return
        pipe = self.redis.pipeline(transaction=False)
        self.acks.fence(pipe)
        self.acks.check(pipe.execute()[-1], f"what was read of {calls} call(s) and the audit")

    def prune_if_due(self) -> dict[str, int] | None:
        """Apply the retention settings, if no archiver did for ``PRUNE_EVERY`` seconds."""
        s = self.settings
        if not s.history_retention and not s.history_tenant_retention:
            return None
        if not self.redis.set(self.keys.history_lock, self.consumer, nx=True, ex=int(PRUNE_EVERY)):
            return None
        return self.history.prune(s.history_retention, s.history_tenant_retention)


class ArchiverThread(threading.Thread):
    """An ``Archiver`` looping in a worker's main process until stopped."""

    def __init__(self, archiver: Archiver, block_ms: int = 1000) -> None:
        super().__init__(name="toolq-history", daemon=True)
        self.archiver = archiver
        self.block_ms = block_ms
        self._stopping = threading.Event()

    def run(self) -> None:
        """Archive batches until stopped; a failing step is logged and retried."""
        with contextlib.suppress(redis.RedisError):
            ensure_group(self.archiver.redis, self.archiver.keys)
        while not self._stopping.is_set():
            try:
                self.archiver.step(self.block_ms)
                self.archiver.prune_if_due()
            except ReplicationError as exc:  # the batch stays pending until confirmed
                log.warning("history archiving waits: %s", exc.message)
                self._stopping.wait(1.0)
            except Exception:
                log.exception("history archiving failed; retrying")
                self._stopping.wait(1.0)

    def stop(self) -> None:
        """Stop after the current batch."""
        self._stopping.set()
