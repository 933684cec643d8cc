"""Requests whose owner is gone.

The gateway that admits a request records its end (``RequestCompleted`` or ``RequestFailed``), and it
says who it is (``RequestAdmitted.gateway_id``) and that it is alive (its heartbeats). A request whose
gateway has stopped heartbeating (it crashed, or the whole stack was killed) will never be ended by
anyone: it is ended here, ``RequestFailed`` with code ``owner_lost``, and a drain never waits on it.
A worker lost under a live gateway needs nothing here: that gateway ends the requests on it itself.

A request whose gateway was not recorded (admitted before gateways said who they were) has no known
owner and is left as it is.
"""

from __future__ import annotations

from datetime import datetime

from nrt.core.events import RequestFailed, request_end_id
from nrt.core.policies.model import Command, ControlState, Emit

OWNER_LOST = "owner_lost"  # the code of the RequestFailed that ends a request whose gateway is gone
OWNER_LOST_STATUS = 503


def orphaned(state: ControlState, now: datetime) -> list[str]:
    """The requests in flight whose gateway is not alive at ``now``, by id."""
    cluster = state.cluster
    return [
        request_id
        for request_id, gateway_id in sorted(cluster.admitted_by.items())
        if request_id in cluster.in_flight and not state.gateway_live(gateway_id, now)
    ]


def held_under(state: ControlState, version: int, now: datetime) -> int:
    """The requests in flight under manifest ``version`` that a live process still holds (what a drain waits for)."""
    lost = set(orphaned(state, now))
    return sum(1 for request_id, v in state.cluster.in_flight.items() if v == version and request_id not in lost)


def end_orphans(state: ControlState, now: datetime) -> list[Command]:
    """``RequestFailed`` (``owner_lost``) for each request whose gateway is gone, stamped ``now``. Its id
    derives from the request alone (:func:`request_end_id`): deciding it again on a later tick is the same
    event, and so is the end a gateway that was only cut off reports once it is back."""
    cluster = state.cluster
    silent_s = state.tuning.lost_after_s
    commands: list[Command] = []
    for request_id in orphaned(state, now):
        gateway_id = cluster.admitted_by[request_id]
        failed = RequestFailed(
            event_id=request_end_id(request_id),
            occurred_at=now,
            request_id=request_id,
            manifest_version=cluster.in_flight[request_id],
            code=OWNER_LOST,
            message=f"the gateway {gateway_id} that admitted it is gone (no heartbeat for {silent_s:g}s)",
            status=OWNER_LOST_STATUS,
        )
        commands.append(Emit(failed, group=f"request:{request_id}"))
    return commands
