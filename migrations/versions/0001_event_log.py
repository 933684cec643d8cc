"""The append-only event log, with a hash chain, and consumer checkpoints.

Revision ID: 0001
Revises:
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "events",
        sa.Column("position", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("event_id", postgresql.UUID(as_uuid=False), nullable=False, unique=True),
        sa.Column("stream_id", sa.Text, nullable=False),
        sa.Column("stream_version", sa.Integer, nullable=False),
        sa.Column("type", sa.Text, nullable=False),
        sa.Column("schema_version", sa.SmallInteger, nullable=False),
        sa.Column("occurred_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.Column("body", sa.JSON, nullable=False),
        sa.Column("prev_hash", sa.LargeBinary, nullable=False),
        sa.Column("hash", sa.LargeBinary, nullable=False),
        sa.UniqueConstraint("stream_id", "stream_version", name="events_stream_version_key"),
        sa.CheckConstraint("position > 0", name="events_position_positive"),
        sa.CheckConstraint("stream_version > 0", name="events_stream_version_positive"),
    )
    op.create_index("events_occurred_at_idx", "events", ["occurred_at"])
    op.create_index("events_type_idx", "events", ["type", "position"])
    # Append-only: ordinary roles can neither change nor remove a recorded event.
    op.execute(
        """
        CREATE FUNCTION events_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            RAISE EXCEPTION 'the event log is append-only: % on events is not allowed', TG_OP;
        END $$;
        """
    )
    op.execute(
        "CREATE TRIGGER events_append_only BEFORE UPDATE OR DELETE ON events "
        "FOR EACH ROW EXECUTE FUNCTION events_append_only()"
    )
    op.execute(
        "CREATE TRIGGER events_no_truncate BEFORE TRUNCATE ON events "
        "FOR EACH STATEMENT EXECUTE FUNCTION events_append_only()"
    )
    op.create_table(
        "consumer_checkpoints",
        sa.Column("consumer", sa.Text, primary_key=True),
        sa.Column("sequence", sa.BigInteger, nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
    )


def downgrade() -> None:
    op.drop_table("consumer_checkpoints")
    op.execute("DROP TRIGGER events_no_truncate ON events")
    op.execute("DROP TRIGGER events_append_only ON events")
    op.drop_table("events")
    op.execute("DROP FUNCTION events_append_only()")
