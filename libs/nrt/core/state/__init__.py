"""The cluster state folded from the event log."""

from nrt.core.state.fold import evolve, fold
from nrt.core.state.model import (
    ApiKey,
    ClusterState,
    Counters,
    KeyUsage,
    LoadFailure,
    ModelState,
    Placement,
    PrefixState,
    SessionState,
    WorkerState,
    prefix_id,
)

__all__ = [
    "ApiKey",
    "ClusterState",
    "Counters",
    "KeyUsage",
    "LoadFailure",
    "ModelState",
    "Placement",
    "PrefixState",
    "SessionState",
    "WorkerState",
    "evolve",
    "fold",
    "prefix_id",
]
