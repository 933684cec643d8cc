"""The policies: pure functions from (state, manifest, trigger, now) to commands.

No I/O and no clock: the cluster_state service feeds them the folded state, the
manifest in force and the time, and executes the commands they return. The events they
build are stamped with that time and carry ids derived from the trigger (``cause_of``),
so the same log, triggers and times always give the same commands. The drained manifest
swap is a state machine of the same kind (``start_swap`` / ``advance_swap``).
"""

from nrt.core.policies.bookkeeping import absorb, note_reply, note_sent, saw_gateway, saw_heartbeat, settle
from nrt.core.policies.budget import with_footprints
from nrt.core.policies.decider import decide
from nrt.core.policies.eviction import enforce_budget, make_resident
from nrt.core.policies.liveness import check as check_liveness
from nrt.core.policies.model import (
    Command,
    Control,
    ControlState,
    Emit,
    Pending,
    PromoteWanted,
    Refuse,
    Stall,
    Sweep,
    Tick,
    Trigger,
    Tuning,
    WorkerSeen,
    cause_of,
)
from nrt.core.policies.placement import budget_problems, check_fit, reconcile
from nrt.core.policies.sessions import sweep
from nrt.core.policies.swap import SwapPlan, SwapRejected, after_cutover, plan_swap, undo_warm
from nrt.core.policies.swap_machine import (
    GroupRan,
    Swap,
    SwapFailure,
    SwapPhase,
    SwapStep,
    SwapTrigger,
    advance_swap,
    start_swap,
)
from nrt.core.policies.warming import co_activate

__all__ = [
    "Command",
    "Control",
    "ControlState",
    "Emit",
    "GroupRan",
    "Pending",
    "PromoteWanted",
    "Refuse",
    "Stall",
    "Swap",
    "SwapFailure",
    "SwapPhase",
    "SwapPlan",
    "SwapRejected",
    "SwapStep",
    "SwapTrigger",
    "Sweep",
    "Tick",
    "Trigger",
    "Tuning",
    "WorkerSeen",
    "absorb",
    "advance_swap",
    "after_cutover",
    "budget_problems",
    "cause_of",
    "check_fit",
    "check_liveness",
    "co_activate",
    "decide",
    "enforce_budget",
    "make_resident",
    "note_reply",
    "note_sent",
    "plan_swap",
    "reconcile",
    "saw_gateway",
    "saw_heartbeat",
    "settle",
    "start_swap",
    "sweep",
    "undo_warm",
    "with_footprints",
]
