"""``POST /v1/chat/completions`` (OpenAI): an AdmittedRequest (``api_gateway.admitted_request``) answered as JSON or SSE.

Errors before the first token are HTTP errors in the OpenAI shape; after it, an SSE error
event (``data: {"error": {...}}``) then ``data: [DONE]``.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

from litestar import Request, Response, post
from litestar.di import NamedDependency
from litestar.openapi import ResponseSpec
from litestar.params import JSONBody
from litestar.response import Stream

from api_gateway.admitted_request import AdmittedRequest, start_request
from api_gateway.auth import infer_key
from api_gateway.cluster_link import ClusterLink
from api_gateway.errors import ApiError
from api_gateway.openai_types import ChatCompletion, ChatCompletionRequest, ErrorResponse
from api_gateway.openapi_docs import KEYED, ChatOperation, errors
from api_gateway.shaping import SSE_DONE, SSE_HEADERS, sse, sse_error
from api_gateway.validate import SESSION_HEADER, validate_chat


@post(
    "/v1/chat/completions",
    guards=[infer_key],
    summary="Create a chat completion (routed through the entry model, or direct to a model id)",
    description=(
        "OpenAI-compatible. `model` is the manifest's entry model (the request is classified and "
        "dispatched; the hop appears as a `dispatch_to_specialist` tool call) or any model id (direct). "
        "A conversation id in the `X-NRT-Session` header (else the `user` field) keeps the model's KV "
        "cache between turns. `stream: true` answers with server-sent events ending in `data: [DONE]`."
    ),
    status_code=200,
    responses={
        200: ResponseSpec(
            ChatCompletion,
            description="The completion, as JSON; with `stream: true`, as server-sent events (`text/event-stream`).",
            generate_examples=False,
        ),
        **errors(400, 404, 413, 500, 502, 503, 504, *KEYED),
    },
    operation_class=ChatOperation,
)
async def chat_completions(
    data: JSONBody[ChatCompletionRequest], request: Request[Any, Any, Any], cluster_link: NamedDependency[ClusterLink]
) -> Response[ChatCompletion] | Response[ErrorResponse] | Stream:
    admitted, first = await start_request(
        "POST /v1/chat/completions",
        request,
        cluster_link,
        lambda: validate_chat(
            data,
            request.headers.get(SESSION_HEADER),
            cluster_link.settings.max_tokens_limit,
            cluster_link.settings.max_messages,
        ),
    )
    if admitted.call.stream:
        return Stream(
            _events(admitted, first), media_type="text/event-stream", headers={**SSE_HEADERS, **admitted.headers}
        )
    await admitted.receive_answer(first)
    return Response(admitted.transcript.completion(time.perf_counter()), headers=admitted.headers)


async def _events(admitted: AdmittedRequest, first: str | None) -> AsyncIterator[bytes]:
    t = admitted.transcript
    try:
        # the role, the router hop and the first token in one write: the client has them at once
        opening = sse(t.opening_chunk())
        yield opening + b"".join(sse(chunk) for chunk in t.content_chunks(first)) if first else opening
        async for text in admitted.remaining_texts(first):
            chunks = t.content_chunks(text)  # none while a tool call's start is being read
            if chunks:
                yield b"".join(sse(chunk) for chunk in chunks)
        for chunk in t.closing_chunks(time.perf_counter(), admitted.call.include_usage):
            yield sse(chunk)
        admitted.complete()
        yield SSE_DONE
    except ApiError as error:  # the admitted failed (and recorded it)
        yield sse_error(error)
        yield SSE_DONE
    finally:  # the client went away (cancelled) or the stream was closed early
        admitted.client_gone()
