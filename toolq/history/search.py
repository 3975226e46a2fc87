"""History search: filters over the calls table, newest first, with keyset cursors.

A cursor is the ``(finished_at, call_id)`` of the last row a page showed, as URL-safe
base64 of JSON (the same shape as the Redis listings' cursors): the next page starts right
after it, so calls archived meanwhile never repeat a row or hide one not reached yet.
"""

from __future__ import annotations

import base64
import binascii
import csv
import io
import json
import math
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, and_, or_, select

from toolq.errors import PayloadError
from toolq.history.models import CallRow
from toolq.results.store import record_to_result

MAX_LIMIT = 1000
"""The largest page a search returns."""


@dataclass(frozen=True)
class CallQuery:
    """Filters of a history search (``None``: any) and the page asked for."""

    run: str | None = None
    tool: str | None = None
    status: str | None = None
    tenant: str | None = None
    submitter: str | None = None
    approver: str | None = None
    since: float | None = None
    """Finished at or after (epoch seconds)."""
    until: float | None = None
    """Finished before (epoch seconds)."""
    error: str | None = None
    """Text the error message contains (case-insensitive)."""
    limit: int = 100
    cursor: str | None = None


@dataclass(frozen=True)
class Found:
    """One page of a search: the calls' stored records, and the next page's cursor."""

    records: list[dict[str, str]]
    next_cursor: str | None


def encode_cursor(finished_at: float, call_id: str) -> str:
    """The opaque cursor after the row ``(finished_at, call_id)``."""
    raw = json.dumps([repr(finished_at), call_id], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(text: str) -> tuple[float, str]:
    """What ``encode_cursor`` wrote; ``PayloadError`` for anything else."""
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        score, member = json.loads(raw)
        value = float(score)
        if not isinstance(member, str) or not math.isfinite(value):
            raise ValueError(score)
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError):
        raise PayloadError(
            f"invalid cursor {text[:60]!r}: pass the next cursor of the previous page"
        ) from None
    return value, member


def search_calls(conn: Connection, query: CallQuery) -> Found:
    """Run ``query`` on ``conn``."""
    if isinstance(query.limit, bool) or not 1 <= query.limit <= MAX_LIMIT:
        raise PayloadError(f"limit must be an integer from 1 to {MAX_LIMIT}, not {query.limit!r}")
    named = (query.run, query.tool, query.status, query.tenant, query.submitter, query.approver)
    if any("\x00" in text for text in (*named, query.error) if text):
        return Found([], None)  # no row holds a NUL (PostgreSQL's text cannot)
    conditions: list[Any] = []
    for column, value in (
        (CallRow.run_id, query.run),
        (CallRow.tool, query.tool),
        (CallRow.status, query.status),
        (CallRow.tenant, query.tenant),
        (CallRow.submitter, query.submitter),
        (CallRow.approver, query.approver),
    ):
        if value is not None:
            conditions.append(column == value)
    if query.since is not None:
        conditions.append(CallRow.finished_at >= query.since)
    if query.until is not None:
        conditions.append(CallRow.finished_at < query.until)
    if query.error:
        conditions.append(CallRow.error.ilike(f"%{_escaped(query.error)}%", escape="\\"))
    if query.cursor:
        at, call_id = decode_cursor(query.cursor)
        if "\x00" in call_id:
            return Found([], None)
        conditions.append(
            or_(
                CallRow.finished_at < at,
                and_(CallRow.finished_at == at, CallRow.call_id < call_id),
            )
        )
    rows = conn.execute(
        select(CallRow.call_id, CallRow.finished_at, CallRow.record)
        .where(*conditions)
        .order_by(CallRow.finished_at.desc(), CallRow.call_id.desc())
        .limit(query.limit + 1)
    ).all()
    shown = rows[: query.limit]
    following = None
    if len(rows) > query.limit:
        following = encode_cursor(shown[-1].finished_at, shown[-1].call_id)
    return Found([json.loads(row.record) for row in shown], following)


def _escaped(text: str) -> str:
    """``text`` with the ``LIKE`` wildcards taken literally."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


SEARCH_COLUMNS = (
    "call_id",
    "run_id",
    "tool",
    "status",
    "tenant",
    "submitter",
    "approver",
    "error",
    "error_type",
    "created_at",
    "finished_at",
)
"""Fields of a search's rows (JSON, JSON lines, CSV columns in this order)."""


def search_row(record: dict[str, str]) -> dict[str, Any]:
    """The row a search shows of one archived call."""
    result = record_to_result(record)
    envelope = json.loads(record.get("envelope") or "{}")
    return {
        "call_id": result.call_id,
        "run_id": result.run_id,
        "tool": result.name,
        "status": result.status.value,
        "tenant": result.tenant,
        "submitter": envelope.get("principal") or "",
        "approver": record.get("decided_by", ""),
        "error": result.error or "",
        "error_type": result.error_type or "",
        "created_at": float(record.get("created_at") or 0),
        "finished_at": float(record.get("finished_at") or 0),
    }


def csv_text(rows: list[dict[str, Any]], header: bool = True) -> str:
    """Rows as CSV (``SEARCH_COLUMNS``), with the header line first when ``header``."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=SEARCH_COLUMNS, lineterminator="\n")
    if header:
        writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()
