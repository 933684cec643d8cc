"""``POST /v1/messages`` (Anthropic Messages API): an AdmittedRequest (``api_gateway.admitted_request``) answered as one
Message or as Anthropic's stream of events.

Its errors, the key checks' and the body decoding's included, are in Anthropic's shape
``{"type": "error", "error": {"type", "message", "details": {"error_code", "param"}}}``;
after the first token, an ``error`` event ends the stream.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from litestar import Request, Response, post
from litestar.di import NamedDependency
from litestar.exceptions import HTTPException
from litestar.openapi import ResponseSpec
from litestar.openapi.spec import OpenAPIType, Schema
from litestar.openapi.spec.operation import Operation
from litestar.params import JSONBody
from litestar.response import Stream

from api_gateway.admitted_request import AdmittedRequest, start_request
from api_gateway.anthropic_shaping import MessageShape, error_body, sse_event
from api_gateway.anthropic_types import ErrorEvent, Message, MessagesRequest
from api_gateway.anthropic_validate import validate_messages
from api_gateway.auth import infer_key
from api_gateway.cluster_link import ClusterLink
from api_gateway.errors import ApiError, from_http_exception
from api_gateway.openapi_docs import ERRORS, document_streamed_chat
from api_gateway.shaping import SSE_HEADERS
from api_gateway.validate import SESSION_HEADER

log = logging.getLogger("api_gateway")

SSE_EVENT = Schema(
    type=OpenAPIType.OBJECT,
    required=["event", "data"],
    properties={
        "event": Schema(
            type=OpenAPIType.STRING,
            enum=[
                "message_start",
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop",
                "error",
            ],
        ),
        "data": Schema(type=OpenAPIType.STRING, description="the event as JSON, its `type` the event's name"),
    },
    description="One server-sent event of a streamed message (`stream: true`).",
)


@dataclass
class MessagesOperation(Operation):
    """``POST /v1/messages``: its 200 is JSON or Anthropic's server-sent events; the conversation id
    may come in a header."""

    def __post_init__(self) -> None:
        document_streamed_chat(self, SSE_EVENT)


def _error_response(error: ApiError) -> Response[ErrorEvent]:
    return Response(error_body(error), status_code=error.status, headers=error.headers)


def _cluster_link(request: Request[Any, Any, Any]) -> ClusterLink:
    cluster_link: ClusterLink = request.app.state.cluster_link
    return cluster_link


def _on_api_error(_: Request[Any, Any, Any], exc: ApiError) -> Response[ErrorEvent]:
    return _error_response(exc)


def _on_http_exception(request: Request[Any, Any, Any], exc: HTTPException) -> Response[ErrorEvent]:
    return _error_response(from_http_exception(exc, _cluster_link(request).settings.max_body_bytes))


def _on_unexpected(request: Request[Any, Any, Any], exc: Exception) -> Response[ErrorEvent]:
    log.exception("%s %s failed", request.method, request.url.path, exc_info=exc)
    return _error_response(ApiError(500, f"internal error: {type(exc).__name__}", code="internal_error"))


@post(
    "/v1/messages",
    guards=[infer_key],
    exception_handlers={
        ApiError: _on_api_error,
        HTTPException: _on_http_exception,
        Exception: _on_unexpected,
    },
    summary="Create a message (Anthropic Messages API; routed through the entry model, or direct to a model id)",
    description=(
        "Anthropic-compatible. `model` is the manifest's entry model (the request is classified and "
        "dispatched; the hop appears as a `tool_use` block for `dispatch_to_specialist` before the text) "
        "or any model id (direct). `max_tokens` is required; `system` is a top-level field. A conversation "
        "id in the `X-NRT-Session` header (else `metadata.user_id`) keeps the model's KV cache between "
        "turns. `stream: true` answers with Anthropic's server-sent events. The key may come as "
        "`x-api-key` (what the Anthropic clients send) or `Authorization: Bearer`."
    ),
    status_code=200,
    responses={
        200: ResponseSpec(
            Message,
            description="The message, as JSON; with `stream: true`, as Anthropic's server-sent events.",
            generate_examples=False,
        ),
        **{
            status: ResponseSpec(ErrorEvent, description=ERRORS[status], generate_examples=False)
            for status in (400, 401, 403, 404, 413, 429, 500, 502, 503, 504)
        },
    },
    operation_class=MessagesOperation,
)
async def create_message(
    data: JSONBody[MessagesRequest], request: Request[Any, Any, Any], cluster_link: NamedDependency[ClusterLink]
) -> Response[Message] | Response[ErrorEvent] | Stream:
    admitted, first = await start_request(
        "POST /v1/messages",
        request,
        cluster_link,
        lambda: validate_messages(
            data,
            request.headers.get(SESSION_HEADER),
            cluster_link.settings.max_tokens_limit,
            cluster_link.settings.max_messages,
        ),
    )
    shape = MessageShape(admitted.transcript, admitted.call.params.stop)
    if admitted.call.stream:
        events = _events(admitted, shape, first)
        return Stream(events, media_type="text/event-stream", headers={**SSE_HEADERS, **admitted.headers})
    await admitted.receive_answer(first)
    return Response(shape.message(time.perf_counter()), headers=admitted.headers)


async def _events(admitted: AdmittedRequest, shape: MessageShape, first: str | None) -> AsyncIterator[bytes]:
    try:
        # the message, the router hop and the first token in one write: the client has them at once
        opening = b"".join(sse_event(event) for event in shape.opening())
        yield opening + b"".join(sse_event(event) for event in shape.deltas(first)) if first else opening
        async for text in admitted.remaining_texts(first):
            events = shape.deltas(text)  # none while a tool call's start is being read
            if events:
                yield b"".join(sse_event(event) for event in events)
        yield b"".join(sse_event(event) for event in shape.closing(time.perf_counter()))
        admitted.complete()
    except ApiError as error:  # the admitted failed (and recorded it)
        yield sse_event(error_body(error))
    finally:  # the client went away (cancelled) or the stream was closed early
        admitted.client_gone()
