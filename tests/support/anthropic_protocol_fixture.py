"""A protocol fixture: a small real HTTP server that speaks the Anthropic Messages API's wire format.

It is not Anthropic and not NRT's own ``/v1/messages``: it answers every request with a fixed
answer, shaped as Anthropic documents it (``POST /v1/messages``, ``x-api-key`` and
``anthropic-version: 2023-06-01`` headers; JSON, or server-sent events ``message_start``,
``content_block_start``, ``content_block_delta`` (``text_delta``), ``content_block_stop``,
``message_delta`` (stop reason and usage), ``message_stop``, with ``ping`` and ``error``),
so the remote tier's client is tested against those bytes over real HTTP.

The requested ``model`` picks the behaviour: ``claude-haiku-3`` answers ``ANSWER``; ``claude-short``
stops at its token limit; ``rate-limited``, ``overloaded`` and ``broken-mid-answer`` fail as the
API does (429 with ``retry-after``, 529, an ``error`` event in the stream); ``slow`` waits
``SLOW_S`` before answering.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from litestar import Litestar, Request, Response, post
from litestar.response import Stream

ANSWER = ("Hello", " from", " the", " fixture")
INPUT_TOKENS, CACHE_READ_TOKENS = 12, 3
SLOW_S = 1.0
RETRY_AFTER = "7"


@dataclass
class Seen:
    """What the fixture received: each request's headers (lower-cased names) and JSON body."""

    headers: list[dict[str, str]] = field(default_factory=list)
    bodies: list[dict[str, Any]] = field(default_factory=list)


def _error(status: int, kind: str, message: str, headers: dict[str, str] | None = None) -> Response[Any]:
    body = {"type": "error", "error": {"type": kind, "message": message}}
    return Response(body, status_code=status, headers=headers or {})


def _event(kind: str, data: dict[str, Any]) -> bytes:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()


def _usage(output_tokens: int) -> dict[str, int]:
    return {"input_tokens": INPUT_TOKENS, "cache_read_input_tokens": CACHE_READ_TOKENS, "output_tokens": output_tokens}


def _message(model: str, text: str, stop_reason: str | None, output_tokens: int) -> dict[str, Any]:
    return {
        "id": "msg_fixture",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": text}] if text else [],
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": _usage(output_tokens),
    }


async def _stream(model: str, pieces: tuple[str, ...], stop_reason: str, fail: bool) -> AsyncIterator[bytes]:
    yield _event("message_start", {"message": _message(model, "", None, 1)})
    yield _event("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}})
    yield _event("ping", {})
    for piece in pieces:
        yield _event("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": piece}})
        await asyncio.sleep(0)
    if fail:
        yield _event("error", {"error": {"type": "overloaded_error", "message": "Overloaded"}})
        return
    yield _event("content_block_stop", {"index": 0})
    yield _event(
        "message_delta",
        {"delta": {"stop_reason": stop_reason, "stop_sequence": None}, "usage": {"output_tokens": len(pieces)}},
    )
    yield _event("message_stop", {})


def anthropic_app(api_key: str, seen: Seen) -> Litestar:
    """The fixture: it takes ``api_key`` only, and records what it receives in ``seen``."""

    @post("/v1/messages", status_code=200)
    async def messages(request: Request[Any, Any, Any]) -> Response[Any] | Stream:
        body = await request.json()
        seen.headers.append({k.lower(): v for k, v in request.headers.items()})
        seen.bodies.append(body)
        if request.headers.get("anthropic-version") != "2023-06-01":
            return _error(400, "invalid_request_error", "anthropic-version: header is required")
        if request.headers.get("x-api-key") != api_key:
            return _error(401, "authentication_error", "invalid x-api-key")
        if "max_tokens" not in body:
            return _error(400, "invalid_request_error", "max_tokens: Field required")
        model = body["model"]
        if model == "rate-limited":
            return _error(
                429, "rate_limit_error", "Number of requests has exceeded your rate limit", {"retry-after": RETRY_AFTER}
            )
        if model == "overloaded":
            return _error(529, "overloaded_error", "Overloaded")
        if model == "slow":
            await asyncio.sleep(SLOW_S)
        pieces = ANSWER[:2] if model == "claude-short" else ANSWER
        stop_reason = "max_tokens" if model == "claude-short" else "end_turn"
        if body.get("stream"):
            stream = _stream(model, pieces, stop_reason, fail=model == "broken-mid-answer")
            return Stream(stream, media_type="text/event-stream")
        return Response(_message(model, "".join(pieces), stop_reason, len(pieces)))

    return Litestar([messages])
