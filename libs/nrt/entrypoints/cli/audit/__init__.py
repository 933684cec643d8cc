"""Audit commands over the PostgreSQL event log: ``nrt replay``, ``nrt audit verify``, ``nrt events``.

One module per command group (``replay_command``, ``verify_command``, ``events_command``), with
their printing in ``render`` and time options in ``moments``; the database they read is chosen
by ``nrt.entrypoints.cli.event_log``. This package only gathers their public names.
"""

from __future__ import annotations

from nrt.entrypoints.cli.audit.events_command import (
    Filters,
    events,
    follow_log,
    last_matching,
    query_log,
    stream_filter,
)
from nrt.entrypoints.cli.audit.moments import parse_moment
from nrt.entrypoints.cli.audit.replay_command import Replay, replay, replay_log
from nrt.entrypoints.cli.audit.verify_command import AuditReport, audit, audit_export, audit_log, verify

__all__ = [
    "AuditReport",
    "Filters",
    "Replay",
    "audit",
    "audit_export",
    "audit_log",
    "events",
    "follow_log",
    "last_matching",
    "parse_moment",
    "query_log",
    "replay",
    "replay_log",
    "stream_filter",
    "verify",
]
