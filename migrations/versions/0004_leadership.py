"""Leadership of the log: one row, (epoch, holder, lease_until), for cluster_state's lease and fencing epoch.

A candidate claims when ``lease_until`` has passed, bumping ``epoch``; the leader renews while the epoch is its
own; every write of a fenced store checks the epoch under a share lock on this row
(``nrt.core.eventlog.leadership``). Epoch 0 and an ended lease: nobody has led yet.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "leadership",
        sa.Column("id", sa.SmallInteger, primary_key=True, autoincrement=False),
        sa.Column("epoch", sa.BigInteger, nullable=False),
        sa.Column("holder", sa.Text, nullable=False),
        sa.Column("lease_until", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("id = 1", name="leadership_one_row"),
    )
    op.execute("INSERT INTO leadership (id, epoch, holder, lease_until) VALUES (1, 0, '', '1970-01-01T00:00:00Z')")


def downgrade() -> None:
    op.drop_table("leadership")
