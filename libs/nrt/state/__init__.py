"""The cluster state folded from the event log."""

from nrt.state.fold import evolve, fold
from nrt.state.model import ClusterState, Counters, ModelState, Placement, SessionState, WorkerState

__all__ = ["ClusterState", "Counters", "ModelState", "Placement", "SessionState", "WorkerState", "evolve", "fold"]
