"""Reporting the commands that make no progress (see ``bookkeeping.stalled``).

A command whose effect never reaches the log is not sent again at once: it backs off,
doubling each time. While it waits, every tick says so with a ``Refuse`` (code
``no_progress``) that names the model, the worker, how many times in a row it made no
progress, why, and when it is tried again; the shell logs each such reason once.
"""

from __future__ import annotations

from datetime import datetime

from nrt.core.policies.model import Command, ControlState, Refuse

NO_PROGRESS = "no_progress"


def report(state: ControlState, now: datetime) -> list[Command]:
    """A ``Refuse`` for each stalled command still backing off at ``now``, by model then worker."""
    commands: list[Command] = []
    for stall in sorted(state.stalls.values(), key=lambda s: (s.model_id, s.worker_id)):
        if stall.retry_at <= now:
            continue
        tier = stall.tier.value if stall.tier is not None else "its new tier"
        reason = (
            f"the command taking {stall.model_id} to {tier} on {stall.worker_id} made no progress "
            f"{stall.count} time(s) in a row ({stall.why}); not sent again before {stall.retry_at.isoformat()}"
        )
        commands.append(Refuse(stall.model_id, reason, code=NO_PROGRESS))
    return commands
