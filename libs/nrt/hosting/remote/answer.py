"""A worker's generate request answered by a remote endpoint, as the chunks of a local generation."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

from nrt.core.manifest import ModelSpec
from nrt.core.protocol import ChatMessage, GenerateChunk, GenerateRequest
from nrt.hosting.model_sources import RemoteEndpoint
from nrt.hosting.prompts import requested_generation
from nrt.hosting.remote import anthropic_messages, openai_chat
from nrt.hosting.remote.call import Piece, RemoteCall
from nrt.hosting.remote.transport import RemoteClient

Wire = Callable[[RemoteClient, RemoteEndpoint, RemoteCall], AsyncIterator[Piece]]
WIRES: dict[str, Wire] = {"openai": openai_chat.chat, "anthropic": anthropic_messages.chat}


def remote_call(request: GenerateRequest, spec: ModelSpec | None) -> RemoteCall:
    """The call for ``request``: a raw prompt as one user turn; the client's settings over the manifest's."""
    messages = (ChatMessage("user", request.prompt),) if request.prompt is not None else request.messages
    chosen = requested_generation(request.params, spec)
    return RemoteCall(
        messages=messages,
        max_tokens=chosen.max_tokens,
        temperature=chosen.temperature,
        top_p=chosen.top_p,
        seed=request.params.seed,
        stop=chosen.stop,
        stream=request.stream,
        response_format=request.params.response_format,
        presence_penalty=request.params.presence_penalty,
        frequency_penalty=request.params.frequency_penalty,
        logit_bias=request.params.logit_bias,
        logprobs=request.params.logprobs,
        tools=request.params.tools,
    )


async def generate(
    client: RemoteClient, endpoint: RemoteEndpoint, request: GenerateRequest, spec: ModelSpec | None, worker_id: str
) -> AsyncIterator[GenerateChunk]:
    """The endpoint's answer as chunks: one per piece when streaming, else one; the last carries
    the finish reason and the endpoint's token usage."""
    async for piece in WIRES[endpoint.protocol](client, endpoint, remote_call(request, spec)):
        yield GenerateChunk(
            request_id=request.request_id,
            model_id=request.model_id,
            worker_id=worker_id,
            text=piece.text,
            finish_reason=piece.finish_reason,
            usage=piece.usage,
        )
