"""Snapshots of the folded state: readers start from the latest and fold only the rest.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "snapshots",
        sa.Column("position", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("fold_version", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("state", sa.LargeBinary, nullable=False),
        sa.Column("chain_hash", sa.LargeBinary, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.CheckConstraint("position > 0", name="snapshots_position_positive"),
    )


def downgrade() -> None:
    op.drop_table("snapshots")
