"""The OpenAI wire shapes the gateway speaks, plus NRT's ``nrt`` block. Plain msgspec Structs."""

from __future__ import annotations

from datetime import datetime  # at run time: msgspec resolves the annotations
from typing import Annotated, Any, Literal

import msgspec

from api_gateway.bounds import Penalty, Seed, Temperature, TopLogprobs, TopP
from nrt.core.protocol import TokenLogprob

# -- requests ---------------------------------------------------------------------------


class ContentPart(msgspec.Struct, kw_only=True):
    type: str
    text: str | None = None


class FunctionCallIn(msgspec.Struct, kw_only=True):
    """An earlier turn's call: the function's name and its arguments as JSON text (as the answer gave them)."""

    name: str
    arguments: str


class ToolCallIn(msgspec.Struct, kw_only=True):
    id: str
    type: str = "function"
    function: FunctionCallIn


class MessageIn(msgspec.Struct, kw_only=True):
    role: str
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCallIn] | None = None  # an assistant turn's calls (api_gateway.client_tools)
    tool_call_id: str | None = None  # role "tool": the call this message is the result of
    function_call: Any = None
    audio: Any = None


class FunctionIn(msgspec.Struct, kw_only=True):
    """A tool's function: its name (1-64 letters, digits, _ or -), what it does, its parameters' JSON Schema."""

    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None  # absent: no parameters
    strict: bool | None = None  # NRT always constrains: every call follows the schema


class ToolIn(msgspec.Struct, kw_only=True):
    type: str  # "function" (the only kind NRT's models call)
    function: FunctionIn | None = None


class NamedFunction(msgspec.Struct, kw_only=True):
    name: str


class ToolChoiceIn(msgspec.Struct, kw_only=True):
    """``tool_choice`` naming the function the answer must call."""

    type: str  # "function"
    function: NamedFunction | None = None


class StreamOptions(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    include_usage: bool = False
    include_obfuscation: bool | None = None  # refused when true: NRT pads no stream events


class JsonSchemaFormat(msgspec.Struct, kw_only=True):
    """``response_format.json_schema``: the answer is constrained to ``schema`` (``strict`` or not)."""

    name: str | None = None  # required (400 when missing)
    description: str | None = None
    schema: Any = None  # a JSON Schema object (400 otherwise)
    strict: bool | None = None  # NRT always constrains: every answer follows the schema


class ResponseFormatIn(msgspec.Struct, kw_only=True):
    """``response_format``: ``text`` (free), ``json_object`` (any JSON object) or ``json_schema``."""

    type: str
    json_schema: JsonSchemaFormat | None = None


class ChatCompletionRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``POST /v1/chat/completions``: every field of OpenAI's published request schema is declared,
    so none is dropped unseen. Each is honoured or refused with a 400 naming it
    (``api_gateway.fields``); a field outside the schema is a 400 too (unknown parameter)."""

    model: str
    messages: list[MessageIn]
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    temperature: Temperature | None = None
    top_p: TopP | None = None
    seed: Seed | None = None
    stop: str | list[str] | None = None
    n: int | None = None
    user: str | None = None  # used as the conversation id when no X-NRT-Session header is sent
    response_format: ResponseFormatIn | None = None  # constrained decoding (api_gateway.response_format)
    presence_penalty: Penalty | None = None
    frequency_penalty: Penalty | None = None
    logit_bias: dict[str, float] | None = None  # token id (as a string) -> bias in [-100, 100]
    logprobs: bool | None = None  # each answer token's log-probability (choices[].logprobs.content)
    top_logprobs: TopLogprobs | None = None  # and this many alternatives per token (needs logprobs)
    tools: list[ToolIn] | None = None  # client tools (api_gateway.client_tools)
    tool_choice: str | ToolChoiceIn | None = None  # auto | none | required | a named function
    parallel_tool_calls: bool | None = None  # several calls in one answer (default true)
    # refused unless absent or harmless (api_gateway.fields): typed loosely so that the 400 names them
    functions: list[Any] | None = None
    function_call: Any = None
    service_tier: Any = None
    store: Any = None
    metadata: Any = None
    modalities: Any = None
    audio: Any = None
    prediction: Any = None
    web_search_options: Any = None
    reasoning_effort: Any = None
    verbosity: Any = None
    moderation: Any = None
    prompt_cache_key: Any = None
    prompt_cache_options: Any = None
    prompt_cache_retention: Any = None
    safety_identifier: Any = None


# -- responses --------------------------------------------------------------------------


class FunctionCall(msgspec.Struct, kw_only=True):
    name: str
    arguments: str  # JSON text


class ToolCall(msgspec.Struct, kw_only=True):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class FunctionFragment(msgspec.Struct, kw_only=True, omit_defaults=True):
    name: str | None = None
    arguments: str | None = None


class ToolCallFragment(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A streamed tool call's piece: its index, then (first) its id, type and name, then argument text."""

    index: int
    id: str | None = None
    type: Literal["function"] | None = None
    function: FunctionFragment


class ResponseMessage(msgspec.Struct, kw_only=True, omit_defaults=True):
    role: Literal["assistant"]  # no default: omit_defaults would drop it
    content: str | None = None
    tool_calls: list[ToolCall] | None = None


class ChoiceLogprobs(msgspec.Struct, kw_only=True):
    """``choices[].logprobs`` when the request asked for ``logprobs``: one entry per answer token."""

    content: list[TokenLogprob]
    refusal: None = None


class Choice(msgspec.Struct, kw_only=True):
    index: int
    message: ResponseMessage
    finish_reason: str | None
    logprobs: ChoiceLogprobs | None = None


class PromptTokensDetails(msgspec.Struct, kw_only=True):
    cached_tokens: int = 0


class Usage(msgspec.Struct, kw_only=True):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails | None = None


class Hop(msgspec.Struct, kw_only=True):
    """One model the request went through, as the gateway saw it."""

    role: Literal["router", "specialist"]
    model: str
    worker_id: str | None
    latency_ms: float  # router: router_svc's own time (classification included); specialist: dispatch -> last token
    ttft_ms: float | None = None  # specialist: dispatch -> first token
    compute_ms: float | None = None  # the model time the worker reports
    cold_start_ms: float | None = None  # the model had to be promoted first
    own_ttft_ms: float | None = None  # specialist: its worker's own time from the request to its first chunk


class Breakdown(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Where one request's time went, hop by hop: each transit and each service's own work (ms).

    From the stamps the frames carry (wall clocks of the gateway, router_svc and the worker:
    exact on one host, as good as the clocks' sync across hosts). A direct call has no router
    hop: ``to_worker_ms`` then covers gateway -> router_svc -> worker.
    """

    gateway_in_ms: float  # the gateway's own work: request received -> route request sent
    to_router_ms: float | None = None  # transit: gateway -> router_svc
    router_ms: float | None = None  # router_svc's own work, the classification included
    to_worker_ms: float | None = None  # transit: router_svc -> the answering worker
    worker_first_ms: float | None = None  # the worker's own work to its first chunk
    worker_ms: float | None = None  # the worker's own work to its last chunk
    first_back_ms: float | None = None  # transit: the first chunk, worker -> gateway
    back_ms: float | None = None  # transit: the last chunk, worker -> gateway
    gateway_out_ms: float  # the gateway's own work: last chunk received -> response built
    total_ms: float  # request received -> response built, as the gateway saw it


class NrtInfo(msgspec.Struct, kw_only=True):
    request_id: str
    manifest_version: int
    routed: bool
    entry_model: str
    final_model: str
    intent: str | None
    confidence: float | None
    scores: dict[str, float]
    rule: str
    session_id: str | None
    hops: list[Hop]
    latency_ms: float  # received -> last token
    ttft_ms: float | None  # received -> first token
    breakdown: Breakdown | None = None  # the same time, hop by hop


class ChatCompletion(msgspec.Struct, kw_only=True):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[Choice]
    usage: Usage
    system_fingerprint: str
    nrt: NrtInfo


class Delta(msgspec.Struct, kw_only=True, omit_defaults=True):
    role: Literal["assistant"] | None = None
    content: str | None = None
    tool_calls: list[ToolCallFragment] | None = None


class ChunkChoice(msgspec.Struct, kw_only=True):
    index: int
    delta: Delta
    finish_reason: str | None = None
    logprobs: ChoiceLogprobs | None = None  # the tokens behind this chunk's text, when asked for


class ChatCompletionChunk(msgspec.Struct, kw_only=True, omit_defaults=True):
    id: str
    object: Literal["chat.completion.chunk"]  # no default: omit_defaults would drop it
    created: int
    model: str
    system_fingerprint: str
    choices: list[ChunkChoice]
    usage: Usage | None = None
    nrt: NrtInfo | None = None


# -- errors -----------------------------------------------------------------------------


class ErrorDetail(msgspec.Struct, kw_only=True):
    message: str
    type: str
    param: str | None = None
    code: str | None = None
    problems: list[str] | None = None  # every problem of an invalid manifest (PUT /v1/manifest)


class ErrorResponse(msgspec.Struct, kw_only=True):
    error: ErrorDetail


# -- models, cluster, manifest -----------------------------------------------------------


class PlacementInfo(msgspec.Struct, kw_only=True):
    worker_id: str
    tier: str
    bytes_held: int


class ThresholdInfo(msgspec.Struct, kw_only=True):
    """The entry model's confidence floor: below it, the fallback (or the router itself) answers."""

    value: float  # 0.0 with source "none": every best label is trusted
    source: str  # manifest | calibrated (by the router model, from its examples) | none (not yet)
    rule: str  # calibrated: the decision rule it bounds (centroid, likelihood)
    examples: int  # calibrated: the labelled examples it was derived from
    summary: str  # e.g. "threshold 0.38, calibrated from 80 examples"


class ModelInfo(msgspec.Struct, kw_only=True):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str
    role: str  # router | specialist | fallback
    routed: bool  # True for the entry model: calling it routes the request
    tier: str  # the tier the manifest declares
    priority: str
    source: str
    description: str
    placements: list[PlacementInfo]  # where it is loaded now, and at which tier
    endpoints: list[str]  # the /v1 endpoints it serves: chat.completions, messages, completions, embeddings
    threshold: ThresholdInfo | None = None  # the entry model only


class ModelList(msgspec.Struct, kw_only=True):
    object: Literal["list"] = "list"
    data: list[ModelInfo]
    manifest_version: int


class ManifestInfo(msgspec.Struct, kw_only=True):
    version: int
    cluster: str | None
    digest: str | None
    text: str


class ModelFailure(msgspec.Struct, kw_only=True):
    """A model whose load failed on every live worker that could hold it (``nrt.core.routing.readiness``)."""

    model: str
    required: bool  # a routed request can need it: not ready without it (``nrt up`` gives up)
    worker_id: str  # where its last load failed
    error: str  # why, as that worker said
    at: datetime


class Readiness(msgspec.Struct, kw_only=True, omit_defaults=True):
    status: Literal["ready", "not_ready"]
    checks: dict[str, str]  # check -> "ok" or what is wrong
    instance: str | None = None  # the id its launcher gave this gateway (NRT_GATEWAY_INSTANCE), if any
    failed: list[ModelFailure] = []  # models that could not be loaded anywhere (omitted when none)


# -- API keys (admin) -------------------------------------------------------------------


class KeyCreateRequest(msgspec.Struct, kw_only=True):
    """``POST /v1/keys``: a new key's name, scope and limits (none: unlimited)."""

    name: str
    scope: Literal["infer", "admin"] = "infer"
    rps: Annotated[float, msgspec.Meta(gt=0)] | None = None
    tokens_per_min: Annotated[int, msgspec.Meta(gt=0)] | None = None


class KeyUsageInfo(msgspec.Struct, kw_only=True):
    requests: int
    completed: int
    failed: int
    prompt_tokens: int
    completion_tokens: int
    last_used_at: datetime | None


class KeyInfo(msgspec.Struct, kw_only=True):
    """A key as the log records it: never the key, nor its hash."""

    key_id: str
    name: str
    scope: str
    rps: float | None
    tokens_per_min: int | None
    created_at: datetime
    created_by: str | None
    revoked_at: datetime | None
    usage: KeyUsageInfo | None = None  # from cluster_state's fold (absent when it did not answer)


class KeyCreated(KeyInfo, kw_only=True):
    """The answer to ``POST /v1/keys``: the key itself, shown this once."""

    key: str


class KeyList(msgspec.Struct, kw_only=True):
    data: list[KeyInfo]
