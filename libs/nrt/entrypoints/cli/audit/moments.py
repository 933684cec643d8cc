"""Times on the command line: an ISO 8601 time, or a duration ago (``--since 10m``)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import click

from nrt.core.units import parse_duration

_ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}")


def parse_moment(text: str, now: datetime | None = None) -> datetime:
    """An ISO 8601 time (UTC when no offset is given) or a duration ago such as ``90s``, ``10m``, ``2h``."""
    value = text.strip()
    if _ISO_DATE.match(value):
        try:
            moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise click.BadParameter(f"{text!r} is not an ISO 8601 time such as 2026-05-01T12:00:00Z") from None
        return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
    try:
        ago = parse_duration(value.removesuffix("ago").strip())
    except ValueError:
        raise click.BadParameter(
            f"{text!r} is neither an ISO 8601 time (2026-05-01T12:00:00Z) nor a duration ago (30s, 10m, 2h)"
        ) from None
    return (now or datetime.now(UTC)) - timedelta(seconds=ago)


def moment_option(_ctx: click.Context, _param: click.Parameter, value: str | None) -> datetime | None:
    """A click callback: the option's value as a time (see :func:`parse_moment`)."""
    return parse_moment(value) if value is not None else None
