"""The decision outbox: cluster_state's decided events, recorded with their cause, until published.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "decision_outbox",
        sa.Column(
            "position", sa.BigInteger, sa.ForeignKey("events.position"), primary_key=True, autoincrement=False
        ),
    )


def downgrade() -> None:
    op.drop_table("decision_outbox")
