"""SQLAlchemy Core tables of the event store (the alembic migration creates them)."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

metadata = sa.MetaData()

events = sa.Table(
    "events",
    metadata,
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
)

consumer_checkpoints = sa.Table(
    "consumer_checkpoints",
    metadata,
    sa.Column("consumer", sa.Text, primary_key=True),
    sa.Column("sequence", sa.BigInteger, nullable=False),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
)

snapshots = sa.Table(
    "snapshots",
    metadata,
    sa.Column("position", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("fold_version", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("state", sa.LargeBinary, nullable=False),
    sa.Column("chain_hash", sa.LargeBinary, nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
)

decision_outbox = sa.Table(
    "decision_outbox",  # decided events not yet published (nrt.core.eventlog.decisions)
    metadata,
    sa.Column("position", sa.BigInteger, sa.ForeignKey("events.position"), primary_key=True, autoincrement=False),
)

leadership = sa.Table(
    "leadership",  # one row: the log's leader, its fencing epoch and lease (nrt.core.eventlog.leadership)
    metadata,
    sa.Column("id", sa.SmallInteger, primary_key=True, autoincrement=False),
    sa.Column("epoch", sa.BigInteger, nullable=False),
    sa.Column("holder", sa.Text, nullable=False),
    sa.Column("lease_until", sa.DateTime(timezone=True), nullable=False),
    sa.CheckConstraint("id = 1", name="leadership_one_row"),
)

# Columns in the order the append path writes them (COPY).
APPEND_COLUMNS = (
    "position",
    "event_id",
    "stream_id",
    "stream_version",
    "type",
    "schema_version",
    "occurred_at",
    "body",
    "prev_hash",
    "hash",
)
