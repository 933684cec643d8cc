"""The manifest as typed, immutable data."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

from nrt.core.vocabulary import DeviceRequirement as DeviceRequirement
from nrt.core.vocabulary import Priority as Priority  # the shared vocabulary, re-exported where manifests use it
from nrt.core.vocabulary import Tier as Tier
from nrt.core.vocabulary import WeightFormat as WeightFormat

if TYPE_CHECKING:
    from nrt.core.manifest.dispatch import DispatchRule

DECLARABLE_TIERS = (Tier.RESIDENT, Tier.STANDBY, Tier.REMOTE)


class Role(StrEnum):
    ROUTER = "router"
    SPECIALIST = "specialist"
    FALLBACK = "fallback"


PROMOTION_HINTS = ("on_router_classification", "on_request", "never")


@dataclass(frozen=True, slots=True)
class Generation:
    """Per-model generation defaults; a request may override them."""

    max_tokens: int = 256
    temperature: float = 0.0
    top_p: float = 1.0
    stop: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class TurnTemplate:
    """How each message of the conversation is written into ``{turns}`` (each has ``{content}``);
    None: the worker's plain-chat default for that role."""

    system: str | None = None
    user: str | None = None
    assistant: str | None = None


TEMPLATE_FIELDS = ("system", "turns", "last_user")  # what a manifest ``template`` may place
TURN_FIELDS = ("content",)  # what a ``turn_template`` part may place


@dataclass(frozen=True, slots=True)
class ModelSpec:
    id: str
    role: Role
    source: str
    tier: Tier = Tier.RESIDENT
    priority: Priority = Priority.NORMAL
    max_active_sessions: int = 16
    co_activation: str | None = None
    promotion_hint: str | None = None
    footprint: int | None = None  # declared bytes; None: taken from the catalogue when known
    device: DeviceRequirement = DeviceRequirement.ANY  # gpu: only on a worker with a GPU; cpu: only on one without
    quantization: WeightFormat | None = None  # an operator's checkpoint's weights; None: int8 on CPU, fp16 on GPU
    description: str = ""
    template: str | None = None  # prompt template for causal models: a built-in's name or a layout
    turn_template: TurnTemplate | None = None  # the per-message parts of ``{turns}`` in ``template``
    generation: Generation = field(default_factory=Generation)
    # Router only: labelled example utterances per intent, and the confidence floor (None: the
    # router calibrates its own, see nrt.hosting.embeddings.calibration).
    intents: tuple[tuple[str, tuple[str, ...]], ...] = ()
    confidence_threshold: float | None = None
    # Remote tier only: the model name at an OpenAI-compatible endpoint, the env var holding the
    # endpoint's key, and where an anthropic:// model's API is (None: https://api.anthropic.com).
    remote_model: str | None = None
    api_key_env: str | None = None
    base_url: str | None = None
    # Specialists and the fallback: how many workers hold a copy (a session's turns stay on the copy
    # holding its KV; the others take its turns when that worker is lost). The entry model is on every router host.
    replicas: int = 1


@dataclass(frozen=True, slots=True)
class Resources:
    gpu_budget: int | None = None  # bytes for resident models
    ram_budget: int | None = None  # bytes for standby models


# A conversation's next turn stays on the specialist that answered its last turn unless the router's
# score for the new target beats that specialist's own score by at least this much. bench.routing's
# "sticky margin" figures chose it (the calibrated centroid router on routing-assistant.yaml): 0.02 keeps
# 99.4% of same-topic follow-ups on their specialist (97.5% with no margin) and lets 94.7% of topic changes
# move (95.0%); 0.1 moves 94.0%, 0.2 only 90.4%.
STICKY_MARGIN = 0.02


@dataclass(frozen=True, slots=True)
class Routing:
    entry: str
    dispatch_rule: DispatchRule
    sticky_margin: float = STICKY_MARGIN  # see STICKY_MARGIN; 0: every turn goes where its own decision says


@dataclass(frozen=True, slots=True)
class LruPolicy:
    idle_threshold: float = 300.0  # seconds a session may idle before its KV is evicted
    min_lifetime: float = 30.0  # sessions younger than this are never evicted
    sweep_interval: float = 10.0  # seconds between sweeps


@dataclass(frozen=True, slots=True)
class DrainPolicy:
    timeout: float = 30.0  # seconds to wait for in-flight requests during a swap
    admission_wait: float = 5.0  # seconds a new request may wait for a swap before 503


@dataclass(frozen=True, slots=True)
class Audit:
    """What the event log keeps beyond the facts it always records."""

    record_prompts: bool = False  # keep each request's routing text with its RequestAdmitted (for what-if replays)


@dataclass(frozen=True, slots=True)
class Manifest:
    cluster: str
    resources: Resources
    router: ModelSpec
    specialists: tuple[ModelSpec, ...]
    fallback: ModelSpec | None
    routing: Routing
    lru: LruPolicy = field(default_factory=LruPolicy)
    drain: DrainPolicy = field(default_factory=DrainPolicy)
    text: str = ""  # the source text, kept verbatim for the event log
    audit: Audit = field(default_factory=Audit)

    @property
    def models(self) -> tuple[ModelSpec, ...]:
        extra = (self.fallback,) if self.fallback is not None else ()
        return (self.router, *self.specialists, *extra)

    def model(self, model_id: str) -> ModelSpec:
        for spec in self.models:
            if spec.id == model_id:
                return spec
        raise KeyError(model_id)

    @property
    def model_ids(self) -> tuple[str, ...]:
        return tuple(spec.id for spec in self.models)

    @property
    def intent_labels(self) -> tuple[str, ...]:
        """The labels the entry model may emit: its declared intents, else the specialist ids."""
        entry = self.model(self.routing.entry)
        if entry.intents:
            return tuple(label for label, _ in entry.intents)
        return tuple(spec.id for spec in self.specialists)

    def dispatch_target(self, intent: str | None) -> str:
        """The model that answers for ``intent``: the rule's target, else fallback, else the entry."""
        rule = self.routing.dispatch_rule
        if rule.fixed_target is not None:
            return rule.fixed_target
        if intent is not None and any(spec.id == intent for spec in self.specialists):
            return intent
        return self.fallback.id if self.fallback is not None else self.routing.entry

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()
