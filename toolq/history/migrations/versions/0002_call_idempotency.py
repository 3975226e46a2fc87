"""The calls' idempotency keys (hashed) and fingerprints, indexed by key."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add ``idem`` (indexed) and ``fingerprint`` to ``history_calls``."""
    with op.batch_alter_table("history_calls") as batch:
        batch.add_column(sa.Column("idem", sa.String(64), nullable=False, server_default=""))
        batch.add_column(sa.Column("fingerprint", sa.Text(), nullable=False, server_default=""))
    op.create_index("ix_history_calls_idem", "history_calls", ["idem"])


def downgrade() -> None:
    """Drop them."""
    op.drop_index("ix_history_calls_idem", "history_calls")
    with op.batch_alter_table("history_calls") as batch:
        batch.drop_column("fingerprint")
        batch.drop_column("idem")
