"""The history tables: calls, events, decisions, audit and the archiver's marks."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create the tables and their indexes."""
    op.create_table(
        "history_calls",
        sa.Column("call_id", sa.String(100), primary_key=True),
        sa.Column("run_id", sa.String(200), nullable=False),
        sa.Column("position", sa.BigInteger(), nullable=False),
        sa.Column("tool", sa.String(200), nullable=False),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("tenant", sa.String(200), nullable=False),
        sa.Column("submitter", sa.String(200), nullable=False),
        sa.Column("approver", sa.String(200), nullable=False),
        sa.Column("error", sa.Text(), nullable=False),
        sa.Column("error_type", sa.String(100), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("finished_at", sa.Float(), nullable=False),
        sa.Column("archived_at", sa.Float(), nullable=False),
        sa.Column("record", sa.Text(), nullable=False),
    )
    for column in ("run_id", "tool", "status", "tenant", "submitter", "approver"):
        op.create_index(f"ix_history_calls_{column}", "history_calls", [column])
    op.create_index("ix_history_calls_created_at", "history_calls", ["created_at"])
    op.create_index("ix_history_calls_finished_at", "history_calls", ["finished_at"])
    op.create_table(
        "history_events",
        sa.Column("run_id", sa.String(200), primary_key=True),
        sa.Column("event_id", sa.String(48), primary_key=True),
        sa.Column("ms", sa.BigInteger(), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("call_id", sa.String(100), nullable=False),
        sa.Column("tenant", sa.String(200), nullable=False),
        sa.Column("type", sa.String(48), nullable=False),
        sa.Column("ts", sa.Float(), nullable=False),
        sa.Column("data", sa.Text(), nullable=False),
    )
    op.create_index("ix_history_events_call_id", "history_events", ["call_id"])
    op.create_index("ix_history_events_tenant", "history_events", ["tenant"])
    op.create_index("ix_history_events_ts", "history_events", ["ts"])
    op.create_index("ix_history_events_run_order", "history_events", ["run_id", "ms", "seq"])
    op.create_table(
        "history_decisions",
        sa.Column("call_id", sa.String(100), primary_key=True),
        sa.Column("run_id", sa.String(200), nullable=False),
        sa.Column("tenant", sa.String(200), nullable=False),
        sa.Column("decided_by", sa.String(200), nullable=False),
        sa.Column("outcome", sa.String(32), nullable=False),
        sa.Column("approvers", sa.Text(), nullable=False),
        sa.Column("approval", sa.Text(), nullable=False),
        sa.Column("decided_at", sa.Float(), nullable=False),
    )
    for column in ("run_id", "tenant", "decided_by", "decided_at"):
        op.create_index(f"ix_history_decisions_{column}", "history_decisions", [column])
    op.create_table(
        "history_audit",
        sa.Column("stream_id", sa.String(48), primary_key=True),
        sa.Column("ms", sa.BigInteger(), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("fields", sa.Text(), nullable=False),
        sa.Column("archived_at", sa.Float(), nullable=False),
    )
    op.create_index("ix_history_audit_order", "history_audit", ["ms", "seq"], unique=True)
    op.create_table(
        "history_marks",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("value", sa.String(200), nullable=False),
    )


def downgrade() -> None:
    """Drop the tables."""
    for table in (
        "history_marks",
        "history_audit",
        "history_decisions",
        "history_events",
        "history_calls",
    ):
        op.drop_table(table)
