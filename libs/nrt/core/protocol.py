"""The messages services exchange over NATS (besides events). One name per concept.

A light module: it imports msgspec only, so the gateway, the policies and the fold load no
inference engine. ``nrt.adapters.inference`` takes its chat message, usage and timings from here.

Subjects are in ``nrt.adapters.bus.subjects``. Request/reply and streaming helpers, with explicit
error frames, are in ``nrt.adapters.bus.rpc``.

- ``nrt.route`` (gateway -> router_svc): a ``RouteRequest``; router_svc classifies it with the
  entry model in its own process and forwards a ``GenerateRequest`` carrying its ``Dispatch``
  to the target, with the gateway's inbox as reply subject: ``GenerateChunk`` frames stream
  straight from the worker that answers, the first one carrying the ``Dispatch`` back. Three
  transits: gateway -> router_svc -> worker -> gateway.
- ``nrt.infer.<model_id>`` (-> workers, queue group ``nrt-workers``): an ``InferRequest``:
  ``GenerateRequest`` streams ``GenerateChunk`` frames to the reply subject;
  ``ClassifyRequest`` answers one ``ClassifyReply``; ``EmbedRequest`` one ``EmbedReply``.
- ``nrt.control.<worker_id>`` (cluster_state -> one worker): a ``ControlCommand``,
  answered by a ``ControlReply`` once the change is done (and its event published).
- ``nrt.workers.heartbeat`` (workers -> anyone): a ``WorkerHeartbeat`` every few seconds.
- ``nrt.gateways.heartbeat`` (gateways -> cluster_state): a ``GatewayHeartbeat`` at the same interval.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

import msgspec

from nrt.core.device import Device
from nrt.core.vocabulary import ApplyOutcome, KeyScope, Reason, Tier, WorkerRole
from nrt.core.vocabulary import FinishReason as FinishReason  # the engine's and the wire's one type

# -- the pieces of a conversation and of an answer (the engine in nrt.adapters.inference uses them too) --

Role = Literal["system", "user", "assistant", "tool"]  # tool: a client tool's result (nrt.core.tool_calls)


class ChatMessage(msgspec.Struct, frozen=True):
    """One turn of a conversation: on the wire, and what a prompt template renders."""

    role: Role
    content: str


class Usage(msgspec.Struct, frozen=True, kw_only=True):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    cached_tokens: int  # prompt tokens served from a KV cache (the session's or a shared prefix's), not prefilled


class Timings(msgspec.Struct, frozen=True, kw_only=True):
    queue_ms: float  # submitted -> prefill started
    prefill_ms: float  # the prefill ONNX runs
    ttft_ms: float  # submitted -> first token chosen
    decode_ms: float  # first token -> last token
    decode_tokens_per_s: float  # (completion_tokens - 1) / decode time
    total_ms: float
    prefilled_tokens: int  # prompt tokens actually run through the model
    batch_size_max: int  # the largest batch this request decoded in


class ResponseFormat(msgspec.Struct, frozen=True, kw_only=True):
    """The shape the answer must have, enforced by constrained decoding on the worker.

    ``json_object``: any JSON object. ``json_schema``: a JSON document valid against ``schema``
    (the JSON Schema as JSON text, in the client's key order: an object's properties are written
    in the schema's order; the text is the compiled grammar's cache key). Free text is no format
    at all (``SamplingParams.response_format`` None).
    """

    type: Literal["json_object", "json_schema"]
    schema: str | None = None  # json_schema: the schema's JSON text
    name: str | None = None  # json_schema: the client's name for it


ToolChoice = Literal["auto", "none", "required"]


class ToolFunction(msgspec.Struct, frozen=True, kw_only=True):
    """A client tool the model may call: its name, what it does, and its parameters' JSON Schema as JSON text."""

    name: str
    description: str = ""
    parameters: str = '{"type": "object"}'


class Tools(msgspec.Struct, frozen=True, kw_only=True):
    """The client tools a request declares and how the answer may use them (``nrt.core.tool_calls``).

    ``choice``: ``auto`` (the model writes text or calls), ``required`` (it calls; ``function`` names the
    one it must call, when the client named one), ``none`` (text only: the tools are still described, so
    a conversation's prompt, and its session's KV cache, stay the same). ``parallel``: several calls in
    one answer.
    """

    functions: tuple[ToolFunction, ...]
    choice: ToolChoice = "auto"
    function: str | None = None  # required: the one function the answer calls
    parallel: bool = True


class TopLogprob(msgspec.Struct, frozen=True, kw_only=True):
    """A token and its log-probability (natural log), as OpenAI's ``top_logprobs`` entries have them."""

    token: str
    logprob: float
    bytes: tuple[int, ...]  # the token's text as UTF-8


class TokenLogprob(TopLogprob, frozen=True, kw_only=True):
    """A generated token's log-probability and the most likely alternatives at its step (OpenAI's shape)."""

    top_logprobs: tuple[TopLogprob, ...] = ()


class SamplingParams(msgspec.Struct, frozen=True, kw_only=True):
    """What a client may set; None means the model's manifest default."""

    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None  # sample from the k most likely tokens only
    seed: int | None = None
    stop: tuple[str, ...] = ()
    response_format: ResponseFormat | None = None  # constrain the answer (None: free text)
    tools: Tools | None = None  # the client's tools: described to the model, its calls constrained to them
    # OpenAI's penalties over the tokens generated so far in this request: logit -= presence * (count > 0)
    # + frequency * count; logit_bias: (token id, bias) pairs added to the logits before anything else
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: tuple[tuple[int, float], ...] = ()
    logprobs: bool = False  # each generated token's log-probability comes back on its chunk
    top_logprobs: int = 0  # and this many most likely alternatives (0-20; needs logprobs)


Constrained = Literal["json_schema", "json_object", "tools"]


def constrained_by(params: SamplingParams) -> Constrained | None:
    """How a request's answer is constrained: to calls of its tools (unless ``tool_choice`` is ``none``),
    else to its response format; None: free text. What the log records of it (``RequestAdmitted``)."""
    if params.tools is not None and params.tools.choice != "none":
        return "tools"
    return params.response_format.type if params.response_format is not None else None


def constraint_text(params: SamplingParams) -> str | None:
    """The text of what constrains the answer: the JSON schema, or the tools (name, description,
    parameters) and the choice, as JSON; None when free (or any JSON object)."""
    kind = constrained_by(params)
    if kind == "tools" and params.tools is not None:
        return msgspec.json.encode(params.tools).decode()
    if kind == "json_schema" and params.response_format is not None:
        return params.response_format.schema
    return None


# -- gateway -> router_svc -------------------------------------------------------------


class RouteRequest(msgspec.Struct, frozen=True, kw_only=True):
    request_id: str
    manifest_version: int  # the version the gateway admitted the request under
    model: str  # the entry model id (routed) or any model id (direct)
    messages: tuple[ChatMessage, ...]
    params: SamplingParams = SamplingParams()
    prompt: str | None = None  # a completion's raw text (a direct call): the model gets it without a chat template
    session_id: str | None = None
    stream: bool = True  # False: the client waits for the whole answer (see GenerateRequest.stream)
    deadline: float | None = None  # unix time by which the answer must be complete; the worker stops there
    # a retry's: the workers the gateway was told were lost while the first attempt waited (router_svc
    # sends the retry to none of them, even before its own view of the log says they are gone)
    avoid_workers: tuple[str, ...] = ()
    attempt: int = 1  # the gateway's attempt at this request: 2 for its one retry after the worker was lost


class Dispatch(msgspec.Struct, frozen=True, kw_only=True, tag="dispatch"):
    """router_svc's decision: it travels with the forwarded ``GenerateRequest`` and comes back to the
    gateway on the answer's first chunk (no message of its own).

    ``received_at`` / ``sent_at`` are router_svc's wall clock (unix seconds) when the request
    arrived and when it was forwarded: with the gateway's and the worker's stamps they split a
    request's time into transits and each service's own work (on one host, or with synced clocks).
    """

    request_id: str
    entry_model: str
    intent: str | None  # None: no label was confident enough
    target: str  # the model that answers
    scores: dict[str, float]
    router_ms: float  # router_svc's own time for the request, from its arrival to the dispatch
    rule: str
    confidence: float | None = None  # the entry model's confidence in its best allowed label
    router_worker_id: str | None = None  # the worker that classified
    router_compute_ms: float | None = None  # the classification time that worker reports
    received_at: float | None = None  # unix time the route request reached router_svc
    sent_at: float | None = None  # unix time router_svc forwarded it


# -- -> workers ------------------------------------------------------------------------


class GenerateRequest(msgspec.Struct, frozen=True, kw_only=True, tag="generate"):
    request_id: str
    model_id: str
    manifest_version: int
    messages: tuple[ChatMessage, ...] = ()  # rendered with the model's prompt template
    prompt: str | None = None  # raw completion text instead of messages
    params: SamplingParams = SamplingParams()
    session_id: str | None = None
    stream: bool = True  # False: the worker sends the whole answer as one chunk, not a message per token
    route: Dispatch | None = None  # a routed request: the router's decision, returned on the first chunk
    deadline: float | None = (
        None  # unix time by which the answer must be complete (the gateway's); the worker stops there
    )


class Accepted(msgspec.Struct, frozen=True, kw_only=True):
    """A worker has taken a generate request: the first frame on the inbox (``Nrt-Frame: accepted``).

    The gateway learns where the request runs (it ends the request at once when that worker is
    lost) and how fast the model decodes there (its inter-token deadline follows that speed)."""

    request_id: str
    model_id: str
    worker_id: str
    decode_tokens_per_s: float | None = None  # the model's recent decode speed on this worker; None: not measured yet


class Cancel(msgspec.Struct, frozen=True, kw_only=True):
    """Stop generating ``request_id`` (``nrt.requests.cancel``, to every worker): its client has gone
    (``client_disconnected``), or the gateway ended it when its NATS connection dropped (``bus_lost``)."""

    request_id: str
    reason: str = "client_disconnected"


class GenerateChunk(msgspec.Struct, frozen=True, kw_only=True, tag="chunk"):
    """A piece of an answer. The last one has ``finish_reason``, ``usage`` and ``timings``."""

    request_id: str
    model_id: str
    worker_id: str
    text: str
    token_ids: tuple[int, ...] = ()
    finish_reason: FinishReason | None = None
    usage: Usage | None = None
    timings: Timings | None = None
    cold_start_ms: float | None = None  # set when this request had to promote the model first
    stop_sequence: str | None = None  # the last chunk: the stop sequence that ended the answer, if one did
    logprobs: tuple[TokenLogprob, ...] = ()  # asked for (SamplingParams.logprobs): one per token of the text
    route: Dispatch | None = None  # the first chunk of a routed request: the router's decision
    received_at: float | None = None  # unix time the request reached the worker
    sent_at: float | None = None  # unix time the worker sent this chunk


InboxFrame = GenerateChunk
"""What a request's inbox receives: the answer's chunks (the first of a routed answer carries the
``Dispatch``), or an error frame (``Nrt-Frame: error``). Before them, the worker that takes a
generate request says so in an ``Accepted`` frame (``Nrt-Frame: accepted``), which readers that
do not care about it skip."""


class ClassifyRequest(msgspec.Struct, frozen=True, kw_only=True, tag="classify"):
    """Score ``labels`` for ``text``: an encoder compares to the labels' example centroids,
    a causal model scores each label's likelihood. Only the given labels can be returned."""

    request_id: str
    model_id: str
    text: str
    labels: tuple[str, ...]
    examples: dict[str, tuple[str, ...]] = {}  # label -> example utterances (encoder routers)


class Calibration(msgspec.Struct, frozen=True, kw_only=True):
    """The confidence floor a router model sets itself when the manifest sets no threshold.

    An encoder derives it from its labelled examples (leave-one-out, see ``nrt.hosting.embeddings.calibration``);
    a label-likelihood model uses its "none of these" odds (``examples`` is 0 then).
    """

    threshold: float  # in [0, 1], compared with ClassifyReply.confidence
    rule: str  # the decision rule whose confidence it bounds, e.g. "centroid" or "likelihood"
    examples: int  # labelled examples it was derived from
    own: float = 0.0  # mean confidence of a held-out example with its own intent in the index
    other: float = 0.0  # mean confidence of an example with its own intent left out
    digest: str = ""  # of the labels and examples it was derived from (nrt.core.routing.examples_digest)


class ClassifyReply(msgspec.Struct, frozen=True, kw_only=True):
    model_id: str
    worker_id: str
    scores: dict[str, float]  # label -> score; higher is better, comparable within one reply
    best: str
    confidence: float  # in [0, 1]: how sure the model is of ``best``
    latency_ms: float
    calibration: Calibration | None = None  # the model's own floor, used when the manifest sets no threshold


class EmbedRequest(msgspec.Struct, frozen=True, kw_only=True, tag="embed"):
    """Embed ``texts`` in one batch. ``dimensions``: the length the caller wants (a model that was
    not Matryoshka-trained refuses any but its own, error code ``invalid_dimensions``)."""

    request_id: str
    model_id: str
    texts: tuple[str, ...]
    dimensions: int | None = None


class EmbedReply(msgspec.Struct, frozen=True, kw_only=True):
    """The vectors of an ``EmbedRequest``'s texts, in order. A reply larger than a NATS message may be
    is streamed as several, each with the next vectors (``embed_frames``); the last has the totals."""

    model_id: str
    worker_id: str
    vectors: list[list[float]]
    latency_ms: float
    prompt_tokens: int = 0  # tokens the texts came to (after truncation to the model's context)


FLOAT_JSON_BYTES = 26  # the most a float32 takes as JSON text, with its comma ("-1.2345678901234567e-05,")


def embed_frames(reply: EmbedReply, max_bytes: int) -> list[EmbedReply]:
    """``reply`` as frames of at most about ``max_bytes`` each, in order, the totals on the last
    (one frame when it fits). Each frame holds at least one vector."""
    width = max((len(v) for v in reply.vectors), default=0) * FLOAT_JSON_BYTES + 2
    rows = max(1, (max_bytes - 512) // max(width, 1))
    if len(reply.vectors) <= rows:
        return [reply]
    parts = [reply.vectors[i : i + rows] for i in range(0, len(reply.vectors), rows)]
    frames = [msgspec.structs.replace(reply, vectors=part, latency_ms=0.0, prompt_tokens=0) for part in parts[:-1]]
    return [*frames, msgspec.structs.replace(reply, vectors=parts[-1])]


InferRequest = GenerateRequest | ClassifyRequest | EmbedRequest


# -- cluster_state -> a worker ----------------------------------------------------------

ControlAction = Literal["load", "promote", "demote", "unload", "evict_session"]


class ControlCommand(msgspec.Struct, frozen=True, kw_only=True):
    action: ControlAction
    model_id: str
    reason: Reason  # recorded on the resulting TierChanged / SessionKvEvicted event
    source: str | None = None  # load: the manifest source (catalogue://…, a path, an endpoint)
    tier: Tier | None = None  # load: the tier to reach (resident | standby | remote)
    session_id: str | None = None  # evict_session
    manifest_version: int = 0


class ControlReply(msgspec.Struct, frozen=True, kw_only=True):
    worker_id: str
    model_id: str
    tier: Tier  # the model's tier on the worker after the command
    bytes_held: int
    elapsed_ms: float
    changed: bool  # False when the model already was where the command asked


# -- workers -> anyone -----------------------------------------------------------------


class HostedModel(msgspec.Struct, frozen=True, kw_only=True):
    model_id: str
    tier: Tier
    bytes_held: int
    active_requests: int = 0
    sessions: int = 0


class WorkerHeartbeat(msgspec.Struct, frozen=True, kw_only=True):
    worker_id: str
    role: WorkerRole = WorkerRole.SPECIALIST
    host: str
    cpu_count: int
    ram_bytes: int  # memory the worker may use for models
    accelerator_bytes: int  # 0 on a CPU host
    providers: tuple[str, ...]
    models: tuple[HostedModel, ...] = ()
    sent_at: float = 0.0  # unix time
    device: Device | None = None  # what it runs models on (None: a worker from before devices were reported)
    device_free_bytes: int | None = None  # memory free on that device now: the GPU's, or the host's RAM
    # how many times its NATS connection has been made again: a rise says that what was on the old one (a
    # request sent to it, a frame it sent) may be gone with a server, and the gateways end what it held
    bus_reconnects: int = 0


class GatewayHeartbeat(msgspec.Struct, frozen=True, kw_only=True):
    """A gateway process is alive: the requests it admitted (``RequestAdmitted.gateway_id``) have an owner."""

    gateway_id: str
    sent_at: float = 0.0  # unix time


# -- gateway -> cluster_state: drained manifest swaps -----------------------------------


class ApplyManifest(msgspec.Struct, frozen=True, kw_only=True):
    """Replace the manifest in force with ``text`` (validated by cluster_state first)."""

    text: str
    requested_by: str = "api"


class WhatIf(msgspec.Struct, frozen=True, kw_only=True):
    """Run the recorded requests (``since``: from then) through the candidate manifest ``text``, applying nothing."""

    text: str
    since: datetime | None = None


class ApplyResult(msgspec.Struct, frozen=True, kw_only=True):
    from_version: int
    to_version: int
    outcome: ApplyOutcome
    drained_ms: float
    warmed: tuple[str, ...] = ()  # models loaded and warmed before the cut-over
    abandoned: int = 0  # in-flight requests still running when the drain timed out


# -- gateway -> cluster_state: API keys -----------------------------------------------


class CreateKey(msgspec.Struct, frozen=True, kw_only=True):
    """Record a new API key (``nrt.keys.create``): its hash only; the gateway made the key and
    shows it once. Answered with the recorded ``ApiKey`` once cluster_state has folded it."""

    name: str
    scope: KeyScope
    key_sha256: str
    rps: float | None = None
    tokens_per_min: int | None = None
    created_by: str | None = None  # the admin key's id


class RevokeKey(msgspec.Struct, frozen=True, kw_only=True):
    """Revoke an API key (``nrt.keys.revoke``); answered with the revoked ``ApiKey``
    (404 ``key_not_found``; 409 ``last_admin_key`` for the last live admin key)."""

    key_id: str
    revoked_by: str | None = None


# -- anyone -> cluster_state: the folded state, promotions within the budget --------------


class StateQuery(msgspec.Struct, frozen=True, kw_only=True):
    """Ask cluster_state (``nrt.state.get``) for its folded ``ClusterState``, the one recorded in PostgreSQL."""


class PromoteModel(msgspec.Struct, frozen=True, kw_only=True):
    """Make ``model_id`` resident now (``nrt.models.promote``).

    cluster_state first demotes the least recently used non-critical residents if the
    budget needs it; when none can go, it answers an error frame with status 503, code
    ``budget_exhausted`` and a message with the numbers.
    """

    model_id: str
    reason: Reason = Reason.ON_DEMAND
    request_id: str | None = None
    worker_id: str | None = None  # promote it on this worker (a request waits there), if it is placed there
    manifest_version: int = 0  # the version the waiting request was admitted under: decide under it (or later)


class PromoteResult(msgspec.Struct, frozen=True, kw_only=True):
    model_id: str
    worker_id: str
    tier: Tier  # the model's tier after the promotion (resident, or remote for a remote model)
    demoted: tuple[str, ...] = ()  # models demoted to make room
    elapsed_ms: float


# -- anyone -> any service: its health (nrt.health.<service>) ---------------------------


class HealthQuery(msgspec.Struct, frozen=True):
    pass


class Health(msgspec.Struct, frozen=True, kw_only=True):
    service: str
    instance: str
    uptime_s: float
    status: str = "ok"
    counters: dict[str, int] = {}  # what the service counts (cluster_state: events_rejected, events_lost)
