"""A protocol fixture: a small real HTTP server that speaks OpenAI's chat completions wire format, as
an inference endpoint of Hub models does (Hugging Face's router, vLLM, TGI: the repository id is the
model's name).

It is not such a server and not NRT's gateway: it answers every request with a fixed answer, shaped
as the API documents it (``POST /v1/chat/completions`` with ``Authorization: Bearer``; JSON, or
server-sent ``chat.completion.chunk`` events, a usage chunk when ``stream_options.include_usage``
asks for it, then ``data: [DONE]``), and records what it received, so a test can check which model
and key the remote tier sent it. It serves only the models it is told of (404 otherwise, as those
servers answer an unknown model).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from litestar import Litestar, Request, Response, post
from litestar.response import Stream

from nrt.adapters.infra import free_port

ANSWER = ("Hello", " from", " the", " endpoint")
PROMPT_TOKENS = 9


@dataclass
class Seen:
    """What the fixture received: each request's headers (lower-cased names) and JSON body."""

    headers: list[dict[str, str]] = field(default_factory=list)
    bodies: list[dict[str, Any]] = field(default_factory=list)


def _error(status: int, message: str) -> Response[Any]:
    return Response({"error": {"message": message, "type": "invalid_request_error"}}, status_code=status)


def _chunk(model: str, delta: dict[str, Any], finish: str | None) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    body = {"id": "chatcmpl-fixture", "object": "chat.completion.chunk", "model": model, "choices": [choice]}
    return f"data: {json.dumps(body)}\n\n".encode()


def _usage() -> dict[str, int]:
    return {
        "prompt_tokens": PROMPT_TOKENS,
        "completion_tokens": len(ANSWER),
        "total_tokens": PROMPT_TOKENS + len(ANSWER),
    }


async def _stream(model: str, include_usage: bool) -> AsyncIterator[bytes]:
    yield _chunk(model, {"role": "assistant", "content": ""}, None)
    for piece in ANSWER:
        yield _chunk(model, {"content": piece}, None)
    yield _chunk(model, {}, "stop")
    if include_usage:
        body = {"id": "chatcmpl-fixture", "object": "chat.completion.chunk", "model": model, "choices": []}
        yield f"data: {json.dumps(body | {'usage': _usage()})}\n\n".encode()
    yield b"data: [DONE]\n\n"


def openai_app(api_key: str, models: tuple[str, ...], seen: Seen) -> Litestar:
    """The fixture: it takes ``api_key`` only, serves ``models``, and records what it receives in ``seen``."""

    @post("/v1/chat/completions", status_code=200)
    async def completions(request: Request[Any, Any, Any]) -> Response[Any] | Stream:
        body = await request.json()
        seen.headers.append({k.lower(): v for k, v in request.headers.items()})
        seen.bodies.append(body)
        if request.headers.get("authorization") != f"Bearer {api_key}":
            return _error(401, "invalid credentials")
        if body.get("model") not in models:
            return _error(404, f"model {body.get('model')!r} is not served here")
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            return Stream(_stream(body["model"], include_usage), media_type="text/event-stream")
        message = {"role": "assistant", "content": "".join(ANSWER)}
        return Response(
            {
                "id": "chatcmpl-fixture",
                "object": "chat.completion",
                "model": body["model"],
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                "usage": _usage(),
            }
        )

    return Litestar([completions])


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # in a thread: leave the test runner's signal handling alone


@contextlib.contextmanager
def serve_in_thread(app: Litestar) -> Iterator[str]:
    """``app`` served by uvicorn on a free local port, in a thread, until the block ends: its base URL."""
    port = free_port()
    server = _Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, name="openai-fixture", daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the fixture's server did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
