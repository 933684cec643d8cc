"""The wire shapes of ``POST /v1/embeddings`` and ``POST /v1/completions`` (OpenAI). Plain msgspec Structs.

A field NRT does not honour is declared all the same, so that a request setting it is refused
with a 400 naming it (``api_gateway.endpoint_validate``) instead of being dropped unread.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from api_gateway.bounds import Seed, Temperature, TopP
from api_gateway.openai_types import NrtInfo, StreamOptions, Usage

Dimensions = Annotated[int, msgspec.Meta(ge=1)]

# -- embeddings ------------------------------------------------------------------------


class EmbeddingRequest(msgspec.Struct, kw_only=True):
    """``POST /v1/embeddings``: ``input`` is a string or a list of strings (token-id arrays: a 400)."""

    model: str
    input: str | list[Any]
    encoding_format: Literal["float", "base64"] | None = None  # None: float
    dimensions: Dimensions | None = None  # only a model's own length (none here is Matryoshka-trained)
    user: str | None = None  # refused (400) when set


class Embedding(msgspec.Struct, kw_only=True):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | str  # str: base64 of the little-endian float32 values


class EmbeddingUsage(msgspec.Struct, kw_only=True):
    prompt_tokens: int
    total_tokens: int


class EmbeddingList(msgspec.Struct, kw_only=True):
    object: Literal["list"] = "list"
    data: list[Embedding]
    model: str
    usage: EmbeddingUsage


# -- completions -----------------------------------------------------------------------


class CompletionRequest(msgspec.Struct, kw_only=True):
    """``POST /v1/completions``: ``prompt`` goes to the model raw (no chat template)."""

    model: str
    prompt: str | list[Any]
    max_tokens: int | None = None
    temperature: Temperature | None = None
    top_p: TopP | None = None
    seed: Seed | None = None
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int | None = None  # 1 only
    # refused (400) when set to anything but their neutral value
    echo: bool | None = None
    suffix: str | None = None
    best_of: int | None = None
    logprobs: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, Any] | None = None
    user: str | None = None


class CompletionChoice(msgspec.Struct, kw_only=True):
    text: str
    index: int
    finish_reason: str | None
    logprobs: None = None


class Completion(msgspec.Struct, kw_only=True, omit_defaults=True):
    id: str
    object: Literal["text_completion"]  # no default: omit_defaults would drop it
    created: int
    model: str
    choices: list[CompletionChoice]
    system_fingerprint: str
    usage: Usage | None = None  # a stream's chunks: none but on the last
    nrt: NrtInfo | None = None
