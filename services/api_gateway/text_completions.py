"""``POST /v1/completions`` (OpenAI): raw text in, text out, JSON or SSE, for generative models.

Each prompt is an AdmittedRequest (``api_gateway.admitted_request``) sent as a direct call with a
raw ``prompt`` instead of messages: router_svc forwards it to a worker of the named model without
classifying it, and the worker gives the text to the model without a chat template. Several
prompts (not streamed) run side by side, one choice each, their usage summed. Errors before the
first token are HTTP errors in the OpenAI shape; after it, an SSE error event then ``data: [DONE]``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import msgspec
from litestar import Request, Response, post
from litestar.di import NamedDependency
from litestar.openapi import ResponseSpec
from litestar.params import JSONBody
from litestar.response import Stream

from api_gateway.admitted_request import AdmittedRequest, start_request
from api_gateway.auth import infer_key
from api_gateway.cluster_link import ClusterLink
from api_gateway.endpoint_docs import CompletionOperation
from api_gateway.endpoint_types import Completion, CompletionChoice, CompletionRequest
from api_gateway.endpoint_validate import validate_completion
from api_gateway.errors import ApiError
from api_gateway.openai_types import ErrorResponse, PromptTokensDetails, Usage
from api_gateway.openapi_docs import KEYED, errors
from api_gateway.served_endpoints import require_endpoint
from api_gateway.shaping import SSE_DONE, SSE_HEADERS, Transcript, sse_error
from api_gateway.validate import ChatCall

_encoder = msgspec.json.Encoder()


@post(
    "/v1/completions",
    guards=[infer_key],
    summary="Create a text completion with a generative model (raw prompt, no chat template)",
    description=(
        "OpenAI-compatible (the legacy completions API). `model` is a generative model of the manifest "
        "(see `endpoints` in GET /v1/models); the prompt goes to it as it is. `prompt` is a string or a list "
        "of strings (one choice each; one string when streaming); token-id arrays are refused, as are `echo`, "
        "`suffix`, `best_of`, `logprobs`, the penalties, `logit_bias` and `user`. `stream: true` answers with "
        "server-sent events ending in `data: [DONE]`."
    ),
    status_code=200,
    responses={
        200: ResponseSpec(
            Completion,
            description="The completion, as JSON; with `stream: true`, as server-sent events (`text/event-stream`).",
            generate_examples=False,
        ),
        **errors(400, 404, 413, 500, 502, 503, 504, *KEYED),
    },
    operation_class=CompletionOperation,
)
async def create_completion(
    data: JSONBody[CompletionRequest], request: Request[Any, Any, Any], cluster_link: NamedDependency[ClusterLink]
) -> Response[Completion] | Response[ErrorResponse] | Stream:
    calls = validate_completion(data, cluster_link.settings.max_tokens_limit)
    bus = cluster_link.require()
    require_endpoint(bus.gate.manifest(), bus.follower.state.manifest_version, calls[0].model, "completions")
    if calls[0].stream:
        admitted, first = await _start(request, cluster_link, calls[0])
        return Stream(
            _events(admitted, first), media_type="text/event-stream", headers={**SSE_HEADERS, **admitted.headers}
        )
    answers = await asyncio.gather(*(_answer(request, cluster_link, call) for call in calls))
    return Response(_completion(answers), headers=answers[0].headers)


async def _start(
    request: Request[Any, Any, Any], cluster_link: ClusterLink, call: ChatCall
) -> tuple[AdmittedRequest, str | None]:
    return await start_request("POST /v1/completions", request, cluster_link, lambda: call)


async def _answer(request: Request[Any, Any, Any], cluster_link: ClusterLink, call: ChatCall) -> AdmittedRequest:
    admitted, first = await _start(request, cluster_link, call)
    await admitted.receive_answer(first)
    return admitted


def _id(t: Transcript) -> str:
    return f"cmpl-{t.request_id}"


def _usage(transcripts: list[Transcript]) -> Usage:
    usages = [t.usage() for t in transcripts]
    cached = sum(u.prompt_tokens_details.cached_tokens for u in usages if u.prompt_tokens_details is not None)
    return Usage(
        prompt_tokens=sum(u.prompt_tokens for u in usages),
        completion_tokens=sum(u.completion_tokens for u in usages),
        total_tokens=sum(u.total_tokens for u in usages),
        prompt_tokens_details=PromptTokensDetails(cached_tokens=cached),
    )


def _completion(answers: list[AdmittedRequest]) -> Completion:
    t = answers[0].transcript
    choices = [
        CompletionChoice(text=a.transcript.text, index=i, finish_reason=a.transcript.finish_reason())
        for i, a in enumerate(answers)
    ]
    return Completion(
        id=_id(t),
        object="text_completion",
        created=t.created,
        model=t.final_model,
        choices=choices,
        system_fingerprint=t.fingerprint,
        usage=_usage([a.transcript for a in answers]),
        nrt=t.info(time.perf_counter()) if len(answers) == 1 else None,
    )


def _chunk(t: Transcript, text: str, finish_reason: str | None = None) -> Completion:
    return Completion(
        id=_id(t),
        object="text_completion",
        created=t.created,
        model=t.final_model,
        choices=[CompletionChoice(text=text, index=0, finish_reason=finish_reason)],
        system_fingerprint=t.fingerprint,
    )


def sse(chunk: Completion) -> bytes:
    return b"data: " + _encoder.encode(chunk) + b"\n\n"


def closing_chunks(t: Transcript, ended: float, include_usage: bool) -> list[Completion]:
    """The finish reason with the ``nrt`` block and usage, or usage on a last chunk with no choices when the
    client asked for ``stream_options.include_usage`` (as OpenAI does)."""
    closing = _chunk(t, "", t.finish_reason())
    closing.nrt = t.info(ended)
    if not include_usage:
        closing.usage = t.usage()
        return [closing]
    usage_only = _chunk(t, "")
    usage_only.choices, usage_only.usage = [], t.usage()
    return [closing, usage_only]


async def _events(admitted: AdmittedRequest, first: str | None) -> AsyncIterator[bytes]:
    t = admitted.transcript
    try:
        if first:
            yield sse(_chunk(t, first))
        async for text in admitted.remaining_texts(first):
            yield sse(_chunk(t, text))
        for chunk in closing_chunks(t, time.perf_counter(), admitted.call.include_usage):
            yield sse(chunk)
        admitted.complete()
        yield SSE_DONE
    except ApiError as error:  # the admitted failed (and recorded it)
        yield sse_error(error)
        yield SSE_DONE
    finally:  # the client went away (cancelled) or the stream was closed early
        admitted.client_gone()
