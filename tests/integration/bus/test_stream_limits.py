"""The events stream's retention: created with the configured limits, an existing stream brought to them."""

from __future__ import annotations

import pytest
from nats.aio.client import Client

from nrt.adapters.bus import subjects
from nrt.adapters.bus.jetstream import StreamLimits, ensure_events_stream
from nrt.adapters.settings import EVENTS_STREAM_MAX_AGE_S, EVENTS_STREAM_MAX_MSGS


async def test_the_stream_keeps_its_recent_part_and_its_owner_brings_it_to_the_configured_limits(nc: Client) -> None:
    js = nc.jetstream()
    created = await js.stream_info(subjects.EVENTS_STREAM)  # the fixture made it with the defaults
    assert (created.config.max_msgs, created.config.max_age) == (EVENTS_STREAM_MAX_MSGS, EVENTS_STREAM_MAX_AGE_S)

    tighter = StreamLimits(max_msgs=100, max_age_s=3600.0)
    untouched = await ensure_events_stream(js, limits=tighter)  # a follower's process: creates, never updates
    assert untouched.config.max_msgs == EVENTS_STREAM_MAX_MSGS

    updated = await ensure_events_stream(js, limits=tighter, update=True)  # cluster_state, `nrt up`
    assert (updated.config.max_msgs, updated.config.max_age) == (100, 3600.0)
    for n in range(130):
        await js.publish(subjects.event("api_gateway", "RequestAdmitted"), b"{}", headers={"Nats-Msg-Id": str(n)})
    state = (await js.stream_info(subjects.EVENTS_STREAM)).state
    assert (state.messages, state.first_seq, state.last_seq) == (100, 31, 130)  # the oldest went first

    unlimited = await ensure_events_stream(js, limits=StreamLimits(max_msgs=0, max_age_s=0), update=True)
    assert (unlimited.config.max_msgs, unlimited.config.max_age or 0.0) == (-1, 0.0)
    assert unlimited.config.duplicate_window == created.config.duplicate_window  # the rest is kept


def test_limits_are_not_negative() -> None:
    with pytest.raises(ValueError, match="must not be negative"):
        StreamLimits(max_msgs=-1)
