"""The cluster state folded from the event log."""

from nrt.state.fold import evolve, fold
from nrt.state.model import (
    ApiKey,
    ClusterState,
    Counters,
    KeyUsage,
    LoadFailure,
    ModelState,
    Placement,
    SessionState,
    WorkerState,
)

__all__ = [
    "ApiKey",
    "ClusterState",
    "Counters",
    "KeyUsage",
    "LoadFailure",
    "ModelState",
    "Placement",
    "SessionState",
    "WorkerState",
    "evolve",
    "fold",
]
