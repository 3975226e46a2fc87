"""The history tables (SQLAlchemy 2 declarative models); the migrations create them.

A call's row keeps its Redis record verbatim (``record``, JSON of the hash), so reading it
back gives the same result as reading Redis did; the other columns are the ones searches
and retention filter on. Audit entries keep every field of their stream entry verbatim.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Float, Index, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    """Declarative base of the history tables."""


class CallRow(Base):
    """One finished call: its record as Redis held it, and the columns searched on."""

    __tablename__ = "history_calls"

    call_id: Mapped[str] = mapped_column(String(100), primary_key=True)
    run_id: Mapped[str] = mapped_column(String(200), index=True)
    position: Mapped[int] = mapped_column(BigInteger)
    """The call's place in its run's dispatch order (``Keys.run_calls``)."""
    tool: Mapped[str] = mapped_column(String(200), index=True)
    status: Mapped[str] = mapped_column(String(32), index=True)
    tenant: Mapped[str] = mapped_column(String(200), index=True)
    submitter: Mapped[str] = mapped_column(String(200), default="", index=True)
    """The principal that dispatched the call (``""``: none)."""
    approver: Mapped[str] = mapped_column(String(200), default="", index=True)
    """Who decided it last (``decided_by``; ``""``: no decision)."""
    error: Mapped[str] = mapped_column(Text, default="")
    error_type: Mapped[str] = mapped_column(String(100), default="")
    created_at: Mapped[float] = mapped_column(Float, index=True)
    finished_at: Mapped[float] = mapped_column(Float, index=True)
    archived_at: Mapped[float] = mapped_column(Float)
    record: Mapped[str] = mapped_column(Text)
    """JSON object: every field of the call's Redis hash, verbatim."""
    idem: Mapped[str] = mapped_column(String(64), default="", index=True)
    """The hash naming the call's idempotency key (``Keys.idempotency`` after ``idem:``;
    ``""``: the key named another call or was gone when archived): a retried dispatch whose
    key left Redis finds its call here."""
    fingerprint: Mapped[str] = mapped_column(Text, default="")
    """The tool and arguments claimed with the key (``""``: none), for the same conflict
    check as in Redis."""


class RunRow(Base):
    """A run with archived calls: its tenant and the newest creation time among them.

    Runs listings read the runs the Redis indexes let go (``cool.lua`` drops a run from them
    once all its calls are final and archived) from here, in the same order.
    """

    __tablename__ = "history_runs"

    run_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(200))
    last_dispatch_at: Mapped[float] = mapped_column(Float)
    """The newest ``created_at`` of the run's archived calls (a dispatch's calls share it)."""

    __table_args__ = (
        Index("ix_history_runs_order", "last_dispatch_at", "run_id"),
        Index("ix_history_runs_tenant_order", "tenant", "last_dispatch_at", "run_id"),
    )


class EventRow(Base):
    """One event of a run's stream, kept with its stream id (``ms``/``seq`` order it)."""

    __tablename__ = "history_events"

    run_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    event_id: Mapped[str] = mapped_column(String(48), primary_key=True)
    ms: Mapped[int] = mapped_column(BigInteger)
    seq: Mapped[int] = mapped_column(BigInteger)
    call_id: Mapped[str] = mapped_column(String(100), index=True)
    tenant: Mapped[str] = mapped_column(String(200), index=True)
    type: Mapped[str] = mapped_column(String(48))
    ts: Mapped[float] = mapped_column(Float, index=True)
    data: Mapped[str] = mapped_column(Text)

    __table_args__ = (Index("ix_history_events_run_order", "run_id", "ms", "seq"),)


class DecisionRow(Base):
    """The approval decision of a call that had one: who, the approvals, the signature."""

    __tablename__ = "history_decisions"

    call_id: Mapped[str] = mapped_column(String(100), primary_key=True)
    run_id: Mapped[str] = mapped_column(String(200), index=True)
    tenant: Mapped[str] = mapped_column(String(200), index=True)
    decided_by: Mapped[str] = mapped_column(String(200), index=True)
    outcome: Mapped[str] = mapped_column(String(32))
    approvers: Mapped[str] = mapped_column(Text, default="")
    approval: Mapped[str] = mapped_column(Text, default="")
    decided_at: Mapped[float] = mapped_column(Float, index=True)


class AuditRow(Base):
    """One audit stream entry: its stream id and all its fields (JSON), in stream order."""

    __tablename__ = "history_audit"

    stream_id: Mapped[str] = mapped_column(String(48), primary_key=True)
    ms: Mapped[int] = mapped_column(BigInteger)
    seq: Mapped[int] = mapped_column(BigInteger)
    fields: Mapped[str] = mapped_column(Text)
    archived_at: Mapped[float] = mapped_column(Float)

    __table_args__ = (Index("ix_history_audit_order", "ms", "seq", unique=True),)


class MarkRow(Base):
    """A named position the archiver keeps (``audit``: the last audit entry archived)."""

    __tablename__ = "history_marks"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(String(200))
