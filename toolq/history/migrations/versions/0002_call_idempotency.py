"""The calls' idempotency keys (hashed) and fingerprints; the runs with archived calls."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add ``idem`` (indexed) and ``fingerprint`` to ``history_calls``; ``history_runs``."""
    with op.batch_alter_table("history_calls") as batch:
        batch.add_column(sa.Column("idem", sa.String(64), nullable=False, server_default=""))
        batch.add_column(sa.Column("fingerprint", sa.Text(), nullable=False, server_default=""))
    indexes = {
        "ix_history_calls_idem": ("history_calls", ["idem"]),
        "ix_history_runs_order": ("history_runs", ["last_dispatch_at", "run_id"]),
        "ix_history_runs_tenant_order": ("history_runs", ["tenant", "last_dispatch_at", "run_id"]),
    }
    op.create_table(
        "history_runs",
        sa.Column("run_id", sa.String(200), primary_key=True),
        sa.Column("tenant", sa.String(200), nullable=False),
        sa.Column("last_dispatch_at", sa.Float(), nullable=False),
    )
    for name, (table, columns) in indexes.items():
        op.create_index(name, table, columns)
    op.execute(
        "INSERT INTO history_runs (run_id, tenant, last_dispatch_at) "
        "SELECT run_id, MAX(tenant), MAX(created_at) FROM history_calls GROUP BY run_id"
    )


def downgrade() -> None:
    """Drop them."""
    op.drop_table("history_runs")
    op.drop_index("ix_history_calls_idem", "history_calls")
    with op.batch_alter_table("history_calls") as batch:
        batch.drop_column("fingerprint")
        batch.drop_column("idem")
