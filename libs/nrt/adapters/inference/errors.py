"""Errors raised by the inference engine: plain exceptions with messages an operator can act on."""

from __future__ import annotations


class InferenceError(Exception):
    """Base class for every error the inference engine raises."""


class ArtifactError(InferenceError):
    """A model artifact directory is missing a file or describes itself inconsistently."""


class ContextWindowError(InferenceError):
    """The prompt plus the requested completion does not fit the model's context window."""

    def __init__(self, *, prompt_tokens: int, max_tokens: int, context_length: int) -> None:
        self.prompt_tokens = prompt_tokens
        self.max_tokens = max_tokens
        self.context_length = context_length
        if prompt_tokens >= context_length:
            message = (
                f"prompt is {prompt_tokens} tokens but the model's context window is "
                f"{context_length} tokens; shorten the prompt"
            )
        else:
            message = (
                f"prompt ({prompt_tokens} tokens) + max_tokens ({max_tokens}) = "
                f"{prompt_tokens + max_tokens} tokens exceeds the model's context window of "
                f"{context_length} tokens; lower max_tokens to at most "
                f"{context_length - prompt_tokens} or shorten the prompt"
            )
        super().__init__(message)


class GeneratorClosedError(InferenceError):
    """The batching generator was closed while a request was queued or running."""


class TemplateError(InferenceError):
    """A prompt template is malformed or cannot render the given messages."""


class GrammarError(InferenceError):
    """A response format (a JSON schema) that the grammar engine cannot compile or follow."""


class LogitBiasError(InferenceError):
    """A ``logit_bias`` token id outside the model's vocabulary."""
