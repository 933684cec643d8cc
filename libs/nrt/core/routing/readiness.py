"""Whether the manifest's models are served, and which of them cannot be: what ``/readyz`` says
about the models and what makes ``nrt up`` give up. Pure: the folded state and the manifest in.

A model is *required* when a routed request can need it: the entry model (it classifies every
routed request) and each model the dispatch rule can send a request to, for every label the entry
model may emit and for no confident label (the fallback, else the entry model itself).

A model *has failed* when no live worker serves it and every live worker that could hold it (of
the role that hosts it, on the device its manifest asks for; there is at least one) has a standing
load failure of its current source: the worker tried to load it, the load failed, and since then
no load there succeeded and the worker did not join anew (the fold keeps these, see
``ModelState.load_failures``). cluster_state retries a failed placement after a back-off that
grows without end, so a retry budget is never spent; a failure stands until a retry succeeds
(readiness then turns green by itself), the worker joins again, or a manifest gives the model
another source.

The models are ready when every required model is served and every other one is served or has
failed (a model no routed request reaches does not hold the cluster back; its failure is reported).
A failed required model is what ``nrt up`` gives up on: waiting would not bring it.
"""

from __future__ import annotations

from dataclasses import dataclass

from nrt.core.manifest import Manifest, ModelSpec
from nrt.core.policies.placement import device_mismatch, host_role
from nrt.core.routing.hosts import serving_workers
from nrt.core.state import ClusterState, LoadFailure, WorkerState


@dataclass(frozen=True, slots=True)
class FailedModel:
    """A model that has failed to load on every live worker that could hold it."""

    model_id: str
    required: bool  # a routed request can need it
    failure: LoadFailure  # the latest of its failures on those workers

    def describe(self) -> str:
        reason = self.failure.error or "no reason recorded"
        return f"{self.model_id} could not be loaded on {self.failure.worker_id}: {reason}"


@dataclass(frozen=True, slots=True)
class ModelsReadiness:
    waiting: tuple[str, ...]  # not served yet and not failed: a placement or a load is under way
    failed: tuple[FailedModel, ...]

    @property
    def given_up(self) -> tuple[FailedModel, ...]:
        """The failed models the cluster cannot be ready without."""
        return tuple(f for f in self.failed if f.required)

    @property
    def ready(self) -> bool:
        return not self.waiting and not self.given_up

    def describe(self) -> str:
        """``ok`` when ready, else each failed model with its reason, then the models still awaited."""
        if self.ready:
            return "ok"
        parts = [f.describe() for f in self.failed]
        if self.waiting:
            parts.append(f"no live worker serves {', '.join(self.waiting)} yet")
        return "; ".join(parts)


def required_models(manifest: Manifest) -> frozenset[str]:
    """The entry model and every model the dispatch rule can route a request to."""
    targets = {manifest.dispatch_target(label) for label in manifest.intent_labels}
    return frozenset({manifest.routing.entry, manifest.dispatch_target(None), *targets})


def could_hold(state: ClusterState, manifest: Manifest, spec: ModelSpec) -> list[WorkerState]:
    """The live workers placement may put ``spec`` on: of its hosts' role, on the device it asks for."""
    role = host_role(manifest, spec.id)
    return [w for w in state.workers.values() if w.alive and w.role == role and device_mismatch(spec, w) is None]


def failure_everywhere(state: ClusterState, manifest: Manifest, spec: ModelSpec) -> LoadFailure | None:
    """The latest load failure of ``spec`` when it has failed (the module's rule), else None."""
    model = state.models.get(spec.id)
    workers = could_hold(state, manifest, spec)
    if model is None or not workers or serving_workers(state, spec.id):
        return None
    failures = [model.load_failures.get(w.worker_id) for w in workers]
    standing = [f for f in failures if f is not None and f.artifact == spec.source]
    if len(standing) < len(workers):
        return None
    return max(standing, key=lambda f: f.at)


def models_readiness(state: ClusterState, manifest: Manifest) -> ModelsReadiness:
    """Which of ``manifest``'s models are awaited and which have failed, in manifest order."""
    required = required_models(manifest)
    waiting: list[str] = []
    failed: list[FailedModel] = []
    for spec in manifest.models:
        failure = failure_everywhere(state, manifest, spec)
        if failure is not None:
            failed.append(FailedModel(spec.id, spec.id in required, failure))
        elif not serving_workers(state, spec.id):
            waiting.append(spec.id)
    return ModelsReadiness(tuple(waiting), tuple(failed))
