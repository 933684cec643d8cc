"""Serving the remote tier: stream a completion from an OpenAI-compatible endpoint."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Sequence

import httpx
import msgspec

from nrt.bus.errors import RemoteError
from nrt.protocol import ChatMessage, GenerateChunk, GenerateRequest, SamplingParams
from specialist_worker.sources import RemoteEndpoint


class _Delta(msgspec.Struct, frozen=True):
    content: str | None = None


class _Choice(msgspec.Struct):
    delta: _Delta = _Delta()
    finish_reason: str | None = None


class _StreamChunk(msgspec.Struct):
    choices: list[_Choice] = []


async def stream_chat(
    endpoint: RemoteEndpoint, messages: Sequence[ChatMessage], params: SamplingParams, deadline_s: float = 60.0
) -> AsyncIterator[tuple[str, str | None]]:
    """Yield (text delta, finish reason) pairs from ``endpoint``'s streamed chat completion."""
    headers = {}
    if endpoint.api_key_env:
        key = os.environ.get(endpoint.api_key_env)
        if not key:
            raise RemoteError("remote_unconfigured", f"${endpoint.api_key_env} is not set for {endpoint.base_url}", 503)
        headers["Authorization"] = f"Bearer {key}"
    body: dict[str, object] = {
        "model": endpoint.model,
        "messages": [{"role": m.role, "content": m.content} for m in messages],
        "stream": True,
    }
    for name in ("max_tokens", "temperature", "top_p", "seed"):
        value = getattr(params, name)
        if value is not None:
            body[name] = value
    if params.stop:
        body["stop"] = list(params.stop)
    try:
        async with (
            httpx.AsyncClient(timeout=deadline_s) as client,
            client.stream("POST", f"{endpoint.base_url}/chat/completions", json=body, headers=headers) as response,
        ):
            if response.status_code >= 400:
                detail = (await response.aread()).decode(errors="replace")[:300]
                raise RemoteError(
                    "remote_failed", f"{endpoint.base_url} answered {response.status_code}: {detail}", 502
                )
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line.removeprefix("data:").strip()
                if data == "[DONE]":
                    return
                chunk = msgspec.json.decode(data, type=_StreamChunk)
                for choice in chunk.choices:
                    yield choice.delta.content or "", choice.finish_reason
    except httpx.HTTPError as exc:
        raise RemoteError("remote_unreachable", f"{endpoint.base_url}: {exc}", 502) from exc


async def generate(endpoint: RemoteEndpoint, request: GenerateRequest, worker_id: str) -> AsyncIterator[GenerateChunk]:
    """``request`` answered by ``endpoint``, as the chunks of a local generation (text and finish reason)."""
    messages = (ChatMessage("user", request.prompt),) if request.prompt is not None else request.messages
    async for text, finish in stream_chat(endpoint, messages, request.params):
        yield GenerateChunk(
            request_id=request.request_id,
            model_id=request.model_id,
            worker_id=worker_id,
            text=text,
            finish_reason="length" if finish == "length" else ("stop" if finish else None),
        )
