"""One entry point for the shell: ``decide(state, manifest, trigger, now) -> commands``."""

from __future__ import annotations

from datetime import datetime

from nrt.core.events import ManifestApplied, RequestRouted, RouterFired, TierChanged, WorkerJoined, WorkerLost
from nrt.core.manifest import Manifest
from nrt.core.policies import liveness, owners, placement, sessions, stalls
from nrt.core.policies.bookkeeping import note_sent
from nrt.core.policies.eviction import enforce_budget, make_resident
from nrt.core.policies.model import Command, ControlState, PromoteWanted, Sweep, Tick, Trigger, cause_of
from nrt.core.policies.warming import co_activate


def decide(state: ControlState, manifest: Manifest | None, trigger: Trigger, now: datetime) -> list[Command]:
    """What the cluster should do about ``trigger``, given the state after it and the manifest in force.

    Pure and deterministic: no clock but ``now``, and the events it builds are stamped ``now``
    with ids derived from the trigger (``cause_of``): the same log, triggers and times give the
    same commands.
    """
    cause = cause_of(trigger, now)
    if isinstance(trigger, Tick):
        commands = liveness.check(state, now, cause) + stalls.report(state, now) + owners.end_orphans(state, now)
        if manifest is not None:
            commands += placement.reconcile(note_sent(state, commands, now), manifest, now, cause)
        return commands
    if manifest is None:
        return []
    if isinstance(trigger, Sweep):
        return sessions.sweep(state, manifest, now)
    if isinstance(trigger, PromoteWanted):
        return make_resident(state, manifest, trigger.model_id, trigger.reason, now, worker_id=trigger.worker_id)
    if isinstance(trigger, RequestRouted | RouterFired):
        return co_activate(state, manifest, trigger, now)
    if isinstance(trigger, TierChanged):
        return enforce_budget(state, manifest, trigger, now)
    if isinstance(trigger, ManifestApplied | WorkerJoined | WorkerLost):
        return placement.reconcile(state, manifest, now, cause)
    return []
