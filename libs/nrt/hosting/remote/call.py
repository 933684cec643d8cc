"""What the remote tier sends and gets back, whatever the wire format."""

from __future__ import annotations

from dataclasses import dataclass

from nrt.core.protocol import ChatMessage, FinishReason, ResponseFormat, Tools, Usage


@dataclass(frozen=True, slots=True)
class RemoteCall:
    """One request to a remote endpoint: the conversation and the sampling settings in force
    (the client's, over the manifest's defaults)."""

    messages: tuple[ChatMessage, ...]
    max_tokens: int
    temperature: float
    top_p: float
    seed: int | None
    stop: tuple[str, ...]
    stream: bool
    response_format: ResponseFormat | None = None  # the shape the answer must have (None: free text)
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: tuple[tuple[int, float], ...] = ()  # token ids of the endpoint's own model
    logprobs: bool = False  # refused by the remote tier: its answer's log-probabilities are not read back
    tools: Tools | None = None  # the client's tools (an OpenAI endpoint gets them in its own shape)

    @property
    def has_tools(self) -> bool:
        """The request declares tools, or its conversation holds tools' results."""
        return self.tools is not None or any(m.role == "tool" for m in self.messages)


@dataclass(frozen=True, slots=True)
class Piece:
    """A piece of the endpoint's answer; the last one has the finish reason and the usage."""

    text: str
    finish_reason: FinishReason | None = None
    usage: Usage | None = None


def usage_of(prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> Usage:
    return Usage(
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        total_tokens=prompt_tokens + completion_tokens,
        cached_tokens=cached_tokens,
    )
