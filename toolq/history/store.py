"""``HistoryStore``: the SQL side of the history, written by the archiver, read by everyone.

One engine per store (PostgreSQL via psycopg 3 in production, an SQLite file for
``toolq dev``/``demo``). Every write is an idempotent upsert keyed by the call id, the
event's (run, stream id) or the audit entry's stream id, and a batch is one transaction:
writing the same batch twice, or half a batch and then all of it, leaves the same rows.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, case, create_engine, delete, event, func, insert, select, tuple_
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import make_url

from toolq.history.migrate import migrate
from toolq.history.models import AuditRow, CallRow, DecisionRow, EventRow, MarkRow, RunRow
from toolq.history.search import CallQuery, Found, search_calls
from toolq.results.audit_chain import ChainStart
from toolq.results.cold import RunBounds

AUDIT_MARK = "audit"
"""Name of the mark holding the last audit stream id archived."""
AUDIT_START = "audit_start"
"""Name of the mark holding where the archived chain starts once retention cut its oldest
entries: ``<seq>:<prev hash>`` of the first entry kept (``verify-audit`` starts there)."""


def id_parts(stream_id: str) -> tuple[int, int]:
    """A stream id's ``(ms, seq)``, the order the tables sort entries by."""
    ms, _, seq = stream_id.partition("-")
    return int(ms), int(seq or 0)


@dataclass
class Batch:
    """What one archiver transaction writes: finished calls, their events, audit entries."""

    calls: list[dict[str, str]] = field(default_factory=list)
    """Redis records (every field of the hash) of the calls, each with its ``call_id`` and
    ``position`` (its place in the run's dispatch order) added, and ``idem`` and
    ``fingerprint`` (``CallRow``) when its idempotency key still named it."""
    events: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)
    """``(run_id, stream id, fields)`` of the calls' events."""
    audit: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    """``(stream id, fields)`` of audit entries, in stream order."""


class HistoryStore:
    """The history tables behind one SQLAlchemy URL.

    An SQLite file is created (with its directory) and brought to the newest schema on
    open; PostgreSQL is migrated by ``toolq history upgrade`` (``migrate``), or on open with
    ``upgrade=True``.
    """

    def __init__(self, url: str, *, upgrade: bool | None = None) -> None:
        parsed = make_url(url)
        self.url = url
        self.sqlite = parsed.get_backend_name() == "sqlite"
        if self.sqlite and parsed.database and parsed.database != ":memory:":
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        self.engine: Engine = create_engine(url, pool_pre_ping=True)
        if self.sqlite:
            event.listen(self.engine, "connect", _sqlite_pragmas)
        if upgrade if upgrade is not None else self.sqlite:
            self.upgrade()

    def upgrade(self) -> None:
        """Bring the tables to the newest schema (Alembic ``upgrade head``)."""
        migrate(self.engine)

    def _insert(self, model: type[Any]) -> Any:
        return (sqlite.insert if self.sqlite else postgresql.insert)(model)

    # -- writing -------------------------------------------------------------------------

    def write(self, batch: Batch, now: float | None = None) -> None:
        """Upsert a batch in one transaction (a repeat writes nothing new)."""
        now = time.time() if now is None else now
        with self.engine.begin() as conn:
            rows = _storable([_call_row(record, now) for record in batch.calls])
            decisions = _storable([d for d in map(_decision_row, batch.calls) if d is not None])
            for model, chunk in [
                *((CallRow, c) for c in _chunks(rows, 500)),
                *((DecisionRow, c) for c in _chunks(decisions, 500)),
            ]:
                stmt = self._insert(model).values(chunk)
                updated = {c: stmt.excluded[c] for c in chunk[0] if c != "call_id"}
                conn.execute(stmt.on_conflict_do_update(index_elements=["call_id"], set_=updated))
            if rows:
                self._write_runs(conn, rows)
            if batch.events:
                tenants = {r["call_id"]: r.get("tenant") or "default" for r in batch.calls}
                events = _storable(
                    [
                        _event_row(run_id, event_id, fields, tenants)
                        for run_id, event_id, fields in batch.events
                    ]
                )
                for chunk in _chunks(events, 500):
                    conn.execute(self._insert(EventRow).values(chunk).on_conflict_do_nothing())
            if batch.audit:
                audit = [
                    {
                        "stream_id": sid,
                        "ms": id_parts(sid)[0],
                        "seq": id_parts(sid)[1],
                        "fields": json.dumps(fields, separators=(",", ":"), ensure_ascii=False),
                        "archived_at": now,
                    }
                    for sid, fields in batch.audit
                ]
                for chunk in _chunks(audit, 500):
                    conn.execute(self._insert(AuditRow).values(chunk).on_conflict_do_nothing())
                last = batch.audit[-1][0]
                mark = self._insert(MarkRow).values(name=AUDIT_MARK, value=last)
                conn.execute(
                    mark.on_conflict_do_update(index_elements=["name"], set_={"value": last})
                )

    def _write_runs(self, conn: Any, rows: list[dict[str, Any]]) -> None:
        """Upsert the batch's runs, keeping each run's newest creation time."""
        runs: dict[str, dict[str, Any]] = {}
        for row in rows:
            run = runs.setdefault(
                row["run_id"],
                {"run_id": row["run_id"], "tenant": row["tenant"], "last_dispatch_at": 0.0},
            )
            run["last_dispatch_at"] = max(run["last_dispatch_at"], row["created_at"])
        for chunk in _chunks(sorted(runs.values(), key=lambda r: r["run_id"]), 500):
            stmt = self._insert(RunRow).values(chunk)
            newer = stmt.excluded.last_dispatch_at > RunRow.last_dispatch_at
            conn.execute(
                stmt.on_conflict_do_update(
                    index_elements=["run_id"],
                    set_={
                        "last_dispatch_at": case(
                            (newer, stmt.excluded.last_dispatch_at),
                            else_=RunRow.last_dispatch_at,
                        )
                    },
                )
            )

    # -- reading -------------------------------------------------------------------------

    def runs(
        self, bounds: RunBounds, after: tuple[float, str] | None, limit: int
    ) -> list[tuple[str, float]]:
        """Runs with archived calls, newest first: ``(run_id, last dispatch)``.

        Strictly after ``after`` (the ``(last dispatch, run_id)`` a page ended on), in the
        order of the Redis runs indexes: time, then run id, descending.
        """
        if not _held(bounds.tenant) or (after is not None and not _held(after[1])):
            return []
        query = self._run_bounds(select(RunRow.run_id, RunRow.last_dispatch_at), bounds)
        if after is not None:
            query = query.where(
                tuple_(RunRow.last_dispatch_at, RunRow.run_id) < tuple_(after[0], after[1])
            )
        query = query.order_by(RunRow.last_dispatch_at.desc(), RunRow.run_id.desc()).limit(limit)
        with self.engine.connect() as conn:
            return [(row.run_id, row.last_dispatch_at) for row in conn.execute(query).all()]

    def runs_total(self, bounds: RunBounds, besides: Sequence[str] = ()) -> int:
        """The runs ``runs`` lists in all, less those of them named in ``besides``."""
        if not _held(bounds.tenant):
            return 0
        besides = [run_id for run_id in besides if _held(run_id)]
        query = self._run_bounds(select(func.count()).select_from(RunRow), bounds)
        with self.engine.connect() as conn:
            total = int(conn.execute(query).scalar_one())
            for start in range(0, len(besides), 500):
                both = query.where(RunRow.run_id.in_(list(besides[start : start + 500])))
                total -= int(conn.execute(both).scalar_one())
        return total

    def run_last_dispatch(self, run_id: str) -> float | None:
        """The newest creation time among a run's archived calls, or ``None``."""
        if not _held(run_id):
            return None
        with self.engine.connect() as conn:
            return conn.execute(
                select(RunRow.last_dispatch_at).where(RunRow.run_id == run_id)
            ).scalar_one_or_none()

    @staticmethod
    def _run_bounds(query: Any, bounds: RunBounds) -> Any:
        tenant, since, until = bounds.tenant, bounds.since, bounds.until
        if tenant is not None:
            query = query.where(RunRow.tenant == tenant)
        if since is not None:
            query = query.where(RunRow.last_dispatch_at >= since)
        if until is not None:
            query = query.where(RunRow.last_dispatch_at <= until)
        return query

    def records(self, call_ids: Sequence[str]) -> dict[str, dict[str, str]]:
        """The stored Redis records of those of ``call_ids`` archived, by call id."""
        call_ids = [call_id for call_id in call_ids if _held(call_id)]
        if not call_ids:
            return {}
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(CallRow.call_id, CallRow.record).where(CallRow.call_id.in_(call_ids))
            ).all()
        return {row.call_id: json.loads(row.record) for row in rows}

    def record(self, call_id: str) -> dict[str, str] | None:
        """The stored Redis record of one call, or ``None``."""
        return self.records([call_id]).get(call_id)

    def claims(self, idems: Sequence[str]) -> dict[str, tuple[str, str, str]]:
        """The archived calls claimed under ``idems`` (``CallRow.idem``), in one query.

        By idem: ``(call_id, status, fingerprint)``; the first claim when two rows share one.
        """
        if not idems:
            return {}
        query = (
            select(CallRow.idem, CallRow.call_id, CallRow.status, CallRow.fingerprint)
            .where(CallRow.idem.in_(list(dict.fromkeys(idems))))
            .order_by(CallRow.created_at.desc())
        )
        with self.engine.connect() as conn:
            rows = conn.execute(query).all()
        return {row.idem: (row.call_id, row.status, row.fingerprint) for row in rows}

    def run_call_ids(self, run_id: str, limit: int | None = None) -> list[str]:
        """A run's archived calls, in creation order (the first ``limit`` of them)."""
        if not _held(run_id):
            return []
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(CallRow.call_id)
                .where(CallRow.run_id == run_id)
                .order_by(CallRow.position, CallRow.created_at, CallRow.call_id)
                .limit(limit)
            ).all()
        return [row.call_id for row in rows]

    def events(
        self, run_id: str, after: str | None = None, count: int | None = None
    ) -> list[tuple[str, dict[str, str]]]:
        """A run's archived events strictly after ``after``: ``(stream id, fields)``, in order."""
        if not _held(run_id):
            return []
        query = select(
            EventRow.event_id, EventRow.type, EventRow.call_id, EventRow.ts, EventRow.data
        ).where(EventRow.run_id == run_id)
        if after:
            ms, seq = id_parts(after)
            query = query.where((EventRow.ms > ms) | ((EventRow.ms == ms) & (EventRow.seq > seq)))
        query = query.order_by(EventRow.ms, EventRow.seq)
        if count is not None:
            query = query.limit(count)
        with self.engine.connect() as conn:
            rows = conn.execute(query).all()
        return [
            (
                row.event_id,
                {"type": row.type, "call_id": row.call_id, "ts": repr(row.ts), "data": row.data},
            )
            for row in rows
        ]

    def audit_entries(self, after: str | None = None) -> Iterator[tuple[str, dict[str, str]]]:
        """Archived audit entries strictly after ``after``: ``(stream id, fields)``, in order."""
        ms, seq = id_parts(after) if after else (-1, -1)
        while True:
            query = (
                select(AuditRow.stream_id, AuditRow.ms, AuditRow.seq, AuditRow.fields)
                .where((AuditRow.ms > ms) | ((AuditRow.ms == ms) & (AuditRow.seq > seq)))
                .order_by(AuditRow.ms, AuditRow.seq)
                .limit(1000)
            )
            with self.engine.connect() as conn:
                rows = conn.execute(query).all()
            for row in rows:
                yield row.stream_id, json.loads(row.fields)
            if len(rows) < 1000:
                return
            ms, seq = rows[-1].ms, rows[-1].seq

    def audit_start(self) -> ChainStart:
        """Where the archived chain starts: seq 1, or the checkpoint retention left."""
        with self.engine.connect() as conn:
            value = conn.execute(
                select(MarkRow.value).where(MarkRow.name == AUDIT_START)
            ).scalar_one_or_none()
        if not value:
            return ChainStart()
        seq, _, prev = value.partition(":")
        return ChainStart(int(seq), prev)

    def archived_audit(self) -> ArchivedAudit:
        """The archived audit as ``verify-audit`` reads it (``audit_log.Archived``)."""
        return ArchivedAudit(self)

    def audit_mark(self) -> str | None:
        """The last audit stream id archived, or ``None``."""
        with self.engine.connect() as conn:
            return conn.execute(
                select(MarkRow.value).where(MarkRow.name == AUDIT_MARK)
            ).scalar_one_or_none()

    def search(self, query: CallQuery) -> Found:
        """A page of archived calls matching ``query``, newest first."""
        with self.engine.connect() as conn:
            return search_calls(conn, query)

    def counts(self) -> dict[str, int]:
        """Rows per table (for tests and ``toolq history status``)."""
        with self.engine.connect() as conn:
            return {
                model.__tablename__: int(
                    conn.execute(select(func.count()).select_from(model)).scalar_one()
                )
                for model in (CallRow, EventRow, DecisionRow, AuditRow, RunRow)
            }

    # -- retention -----------------------------------------------------------------------

    def prune(
        self,
        retention: Mapping[str, int],
        per_tenant: Mapping[str, Mapping[str, int]] | None = None,
        now: float | None = None,
    ) -> dict[str, int]:
        """Delete what is older than its retention (days, by kind); rows deleted, by kind.

        Kinds: ``results`` (calls and their decisions, by finish time), ``events`` (by event
        time), ``audit`` (by stream id time). A tenant's own retention replaces the default
        for its rows; a kind with no retention is kept forever. Nothing else deletes rows.
        """
        now = time.time() if now is None else now
        per_tenant = per_tenant or {}
        deleted = {"results": 0, "events": 0, "audit": 0}
        with self.engine.begin() as conn:
            for kind, model, column in (
                ("results", CallRow, CallRow.finished_at),
                ("results", DecisionRow, DecisionRow.decided_at),
                ("results", RunRow, RunRow.last_dispatch_at),
                ("events", EventRow, EventRow.ts),
            ):
                tenant_col = model.tenant
                for tenant, days in per_tenant.items():
                    if kind in days:
                        cutoff = now - days[kind] * 86400
                        stmt = delete(model).where(tenant_col == tenant, column < cutoff)
                        n = conn.execute(stmt).rowcount
                        deleted[kind] += n if model is CallRow or model is EventRow else 0
                if kind in retention:
                    cutoff = now - retention[kind] * 86400
                    stmt = delete(model).where(column < cutoff)
                    own = [t for t, days in per_tenant.items() if kind in days]
                    if own:
                        stmt = stmt.where(tenant_col.not_in(own))
                    n = conn.execute(stmt).rowcount
                    deleted[kind] += n if model is CallRow or model is EventRow else 0
            if "audit" in retention:
                cutoff_ms = int((now - retention["audit"] * 86400) * 1000)
                checkpoint = self._audit_checkpoint(conn, cutoff_ms)
                deleted["audit"] = conn.execute(
                    delete(AuditRow).where(AuditRow.ms < cutoff_ms)
                ).rowcount
                if deleted["audit"] and checkpoint is not None:
                    conn.execute(delete(MarkRow).where(MarkRow.name == AUDIT_START))
                    conn.execute(insert(MarkRow).values(name=AUDIT_START, value=checkpoint))
        return deleted

    @staticmethod
    def _audit_checkpoint(conn: Any, cutoff_ms: int) -> str | None:
        """``<seq>:<prev>`` the chain continues from once the entries before ``cutoff_ms`` go.

        The first entry kept names both; with none kept, the seq after the last entry and
        that entry's hash. None when the entries carry no chain fields (from before it).
        """
        kept = conn.execute(
            select(AuditRow.fields)
            .where(AuditRow.ms >= cutoff_ms)
            .order_by(AuditRow.ms, AuditRow.seq)
            .limit(1)
        ).scalar_one_or_none()
        if kept is not None:
            fields = json.loads(kept)
            if "seq" in fields and "prev" in fields:
                return f"{fields['seq']}:{fields['prev']}"
            return None
        last = conn.execute(
            select(AuditRow.fields).order_by(AuditRow.ms.desc(), AuditRow.seq.desc()).limit(1)
        ).scalar_one_or_none()
        if last is None:
            return None
        fields = json.loads(last)
        if "seq" in fields and "hash" in fields:
            return f"{int(fields['seq']) + 1}:{fields['hash']}"
        return None

    def close(self) -> None:
        """Release the engine's connections."""
        self.engine.dispose()


class ArchivedAudit:
    """A history store's audit entries as the chain check reads them (``Archived``)."""

    def __init__(self, store: HistoryStore) -> None:
        self.store = store

    def entries(self) -> Iterator[tuple[str, dict[str, str]]]:
        """Every archived entry, in stream order."""
        return self.store.audit_entries()

    def mark(self) -> str | None:
        """The stream id of the last entry archived."""
        return self.store.audit_mark()

    def start(self) -> ChainStart:
        """Where the archived chain starts."""
        return self.store.audit_start()


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    """WAL (readers beside the archiver) and a busy timeout for several writers."""
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA busy_timeout=10000")
    cursor.close()


def _held(text: str | None) -> bool:
    """Whether a stored row can hold ``text``: PostgreSQL's text holds no NUL character.

    A read naming a value with one (any client's input) finds nothing, instead of failing
    on the database's refusal.
    """
    return text is None or "\x00" not in text


def _storable(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` with each NUL in their text replaced by U+FFFD: PostgreSQL's text holds none.

    Any Redis client can write a record, and one NUL would otherwise fail the archive of
    every batch holding it, and so of every call behind it. A call's ``record`` (JSON)
    keeps the value as it was.
    """
    return [
        {k: v.replace("\x00", "\ufffd") if isinstance(v, str) else v for k, v in row.items()}
        if any(isinstance(v, str) and "\x00" in v for v in row.values())
        else row
        for row in rows
    ]


def _chunks(rows: list[dict[str, Any]], size: int) -> Iterator[list[dict[str, Any]]]:
    for i in range(0, len(rows), size):
        yield rows[i : i + size]


def _float(value: str | None) -> float:
    try:
        return float(value or 0)
    except ValueError:
        return 0.0


_ADDED = ("call_id", "position", "idem", "fingerprint")
"""What the archiver adds to a record (``Batch.calls``): columns, not fields of the hash."""


def _call_row(record: Mapping[str, str], now: float) -> dict[str, Any]:
    """The columns of a call's row, from its Redis record."""
    envelope = json.loads(record.get("envelope") or "{}")
    result = json.loads(record.get("result") or "{}")
    return {
        "call_id": record["call_id"],
        "run_id": record.get("run_id", ""),
        "position": int(record.get("position") or 0),
        "tool": record.get("name") or envelope.get("name", ""),
        "status": record.get("status", ""),
        "tenant": record.get("tenant") or envelope.get("tenant") or "default",
        "submitter": envelope.get("principal") or "",
        "approver": record.get("decided_by", ""),
        "error": str(result.get("error") or ""),
        "error_type": str(result.get("error_type") or ""),
        "created_at": _float(record.get("created_at")),
        "finished_at": _float(record.get("finished_at") or record.get("updated_at")),
        "archived_at": now,
        "idem": record.get("idem", ""),
        "fingerprint": record.get("fingerprint", ""),
        "record": json.dumps(
            {k: v for k, v in record.items() if k not in _ADDED},
            separators=(",", ":"),
            ensure_ascii=False,
        ),
    }


def _decision_row(record: Mapping[str, str]) -> dict[str, Any] | None:
    """The decision row of a call a person decided, or ``None``."""
    if not record.get("decided_by"):
        return None
    status = record.get("status", "")
    return {
        "call_id": record["call_id"],
        "run_id": record.get("run_id", ""),
        "tenant": record.get("tenant") or "default",
        "decided_by": record["decided_by"],
        "outcome": "denied" if status == "denied" else "approved",
        "approvers": record.get("approvers", ""),
        "approval": record.get("approval", ""),
        "decided_at": _float(record.get("updated_at")),
    }


def _event_row(
    run_id: str, event_id: str, fields: Mapping[str, str], tenants: Mapping[str, str]
) -> dict[str, Any]:
    ms, seq = id_parts(event_id)
    call_id = fields.get("call_id", "")
    return {
        "run_id": run_id,
        "event_id": event_id,
        "ms": ms,
        "seq": seq,
        "call_id": call_id,
        "tenant": tenants.get(call_id, "default"),
        "type": fields.get("type", ""),
        "ts": _float(fields.get("ts")),
        "data": fields.get("data", "{}"),
    }
