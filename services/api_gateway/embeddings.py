"""``POST /v1/embeddings`` (OpenAI): one batch of texts embedded by an encoder model, on one worker.

The request is admitted as a chat request is: the route's guard checks the key and its request
rate, the admission gate waits out a manifest swap, the log gets ``RequestAdmitted`` and then one
``RequestCompleted`` (with the texts' tokens as its prompt tokens, charged to the key's token
limit) or ``RequestFailed``. The texts go to the model's subject in one ``EmbedRequest`` (no
router hop: there is nothing to route), which the worker embeds as one batch.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import msgspec
from litestar import Request, Response, post
from litestar.di import NamedDependency
from litestar.openapi import ResponseSpec
from litestar.params import JSONBody
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from api_gateway.admitted_request import REQUEST_ID_HEADER
from api_gateway.auth import caller, infer_key
from api_gateway.cluster_link import Bus, ClusterLink
from api_gateway.endpoint_types import Embedding, EmbeddingList, EmbeddingRequest, EmbeddingUsage
from api_gateway.endpoint_validate import EmbedCall, encode_vector, validate_embeddings
from api_gateway.errors import ApiError
from api_gateway.openai_types import ErrorResponse
from api_gateway.openapi_docs import KEYED, errors
from api_gateway.reply_stream import require_serving
from api_gateway.request_ended import RequestEnded, charge, emit, measure
from api_gateway.served_endpoints import require_endpoint
from api_gateway.shaping import Transcript
from nrt.adapters.bus import rpc, subjects, tracing
from nrt.adapters.bus.errors import BadRequest, RemoteError
from nrt.core.events import RequestAdmitted
from nrt.core.protocol import EmbedReply, EmbedRequest, GenerateChunk, Usage

tracer = trace.get_tracer("api_gateway")


@post(
    "/v1/embeddings",
    guards=[infer_key],
    summary="Create embeddings with an encoder model",
    description=(
        "OpenAI-compatible. `model` is an encoder model of the manifest (see `endpoints` in GET /v1/models). "
        "`input` is a string or a list of strings (token-id arrays are refused); the texts are embedded as "
        "one batch. `encoding_format` `base64` gives each vector as base64 of little-endian float32. "
        "`dimensions` must be the model's own length (no model here is Matryoshka-trained)."
    ),
    status_code=200,
    responses={
        200: ResponseSpec(
            EmbeddingList, description="One unit-length vector per input, in order.", generate_examples=False
        ),
        **errors(400, 404, 413, 500, 502, 503, 504, *KEYED),
    },
)
async def create_embeddings(
    data: JSONBody[EmbeddingRequest], request: Request[Any, Any, Any], cluster_link: NamedDependency[ClusterLink]
) -> Response[EmbeddingList] | Response[ErrorResponse]:
    started, started_wall = time.perf_counter(), time.time()
    span = tracer.start_span(
        "POST /v1/embeddings", context=tracing.extract(dict(request.headers)), kind=SpanKind.SERVER
    )
    with trace.use_span(span, end_on_exit=False):
        try:
            bus = cluster_link.require()
            call = validate_embeddings(data)
            admission = await bus.gate.admit()
            require_endpoint(admission.manifest, admission.version, call.model, "embeddings")
        except ApiError as error:
            span.set_status(Status(StatusCode.ERROR, error.message))
            span.end()
            raise
        transcript = Transcript(
            request_id=uuid.uuid4().hex,
            model=call.model,
            routed=False,
            manifest_version=admission.version,
            session_id=None,
            started=started,
            created=int(started_wall),
            started_wall=started_wall,
        )
        span.set_attribute("nrt.request_id", transcript.request_id)
        span.set_attribute("nrt.model", call.model)
        return await _embed(cluster_link, bus, call, transcript, caller(request).key_id, span)


async def _embed(
    cluster_link: ClusterLink, bus: Bus, call: EmbedCall, t: Transcript, key_id: str | None, span: Span
) -> Response[EmbeddingList]:
    headers = {REQUEST_ID_HEADER: t.request_id}

    def end(error: ApiError | None) -> None:
        if error is not None:
            span.set_status(Status(StatusCode.ERROR, error.message))
            span.set_attribute("http.response.status_code", error.status)
        span.end()
        fact = RequestEnded(transcript=t, key_id=key_id, ended=time.perf_counter(), error=error)
        for handle in (measure(cluster_link.metrics), charge(bus.limiter), emit(bus.emitter)):
            handle(fact)

    bus.emitter.emit(
        RequestAdmitted(
            request_id=t.request_id,
            manifest_version=t.manifest_version,
            model_id=call.model,
            stream=False,
            key_id=key_id,
            gateway_id=cluster_link.gateway_id,
        )
    )
    ask = EmbedRequest(request_id=t.request_id, model_id=call.model, texts=call.texts, dimensions=call.dimensions)
    try:
        require_serving(bus.follower.state, call.model)
        settings = cluster_link.settings
        first = min(settings.first_token_timeout, settings.request_timeout)  # a cold start, the batch's runs
        reply = await _ask(bus, ask, first, min(settings.idle_timeout, settings.request_timeout))
    except RemoteError as exc:
        error = ApiError.from_remote(exc)
        error.headers.update(headers)
        end(error)
        raise error from exc
    except BaseException:
        end(ApiError(500, "the request was interrupted", code="internal_error"))
        raise
    if len(reply.vectors) != len(call.texts):
        error = ApiError(502, f"{reply.worker_id} sent {len(reply.vectors)} vectors for {len(call.texts)} texts")
        end(error)
        raise error
    tokens = reply.prompt_tokens
    usage = Usage(prompt_tokens=tokens, completion_tokens=0, total_tokens=tokens, cached_tokens=0)
    last = GenerateChunk(
        request_id=t.request_id,
        model_id=reply.model_id,
        worker_id=reply.worker_id,
        text="",
        finish_reason="stop",
        usage=usage,
    )
    t.on_chunk(last, time.perf_counter(), time.time())
    end(None)
    body = EmbeddingList(
        data=[Embedding(index=i, embedding=encode_vector(v, call.base64)) for i, v in enumerate(reply.vectors)],
        model=call.model,
        usage=EmbeddingUsage(prompt_tokens=tokens, total_tokens=tokens),
    )
    return Response(body, headers=headers)


async def _ask(bus: Bus, ask: EmbedRequest, first_timeout: float, idle_timeout: float) -> EmbedReply:
    """The worker's reply to ``ask``, its frames joined (a large batch's vectors come in several): the first
    within ``first_timeout``, each next one within ``idle_timeout``; else a 504 naming the subject."""
    subject = subjects.infer(ask.model_id)
    if len(rpc.encode(ask)) > bus.nc.max_payload:
        raise BadRequest(
            f"'input' is too large to send to a worker ({bus.nc.max_payload} bytes at most): split it", code="too_large"
        )
    vectors: list[list[float]] = []
    last: EmbedReply | None = None
    frames = rpc.stream(bus.nc, subject, ask, EmbedReply, first_timeout=first_timeout, idle_timeout=idle_timeout)
    async for frame in frames:
        vectors.extend(frame.vectors)
        last = frame
    if last is None:
        raise RemoteError("bad_reply", f"{subject} answered no vectors", 502)
    return msgspec.structs.replace(last, vectors=vectors)
