"""Errors that cross the bus as explicit error frames: a code, a message and an HTTP status."""

from __future__ import annotations

import msgspec


class ErrorFrame(msgspec.Struct, frozen=True, kw_only=True):
    code: str  # stable and machine-readable, e.g. "context_window_exceeded"
    message: str  # for a person: what went wrong and what would be valid
    status: int = 500  # the HTTP status a gateway should answer with
    retry_after: float | None = None  # seconds after which the same request may succeed (a transient failure)


class RemoteError(Exception):
    """A failure reported by (or about) the other side of a NATS call."""

    def __init__(self, code: str, message: str, status: int = 500, retry_after: float | None = None) -> None:
        self.code, self.message, self.status, self.retry_after = code, message, status, retry_after
        super().__init__(f"{code}: {message}")

    def frame(self) -> ErrorFrame:
        return ErrorFrame(code=self.code, message=self.message, status=self.status, retry_after=self.retry_after)

    @classmethod
    def from_frame(cls, frame: ErrorFrame) -> RemoteError:
        return cls(frame.code, frame.message, frame.status, frame.retry_after)


class BadRequest(RemoteError):
    def __init__(self, message: str, code: str = "bad_request") -> None:
        super().__init__(code, message, 400)


class Unavailable(RemoteError):
    def __init__(self, message: str, code: str = "unavailable", retry_after: float | None = None) -> None:
        super().__init__(code, message, 503, retry_after)


INVALID_RESPONSE_FORMAT = "invalid_response_format"  # the error code of a response format that cannot compile
INVALID_LOGIT_BIAS = "invalid_logit_bias"  # a logit_bias token id outside the model's vocabulary
INVALID_DIMENSIONS = "invalid_dimensions"  # an embedding length the model cannot give
NOT_AN_ENCODER = "not_an_encoder"  # an embed request for a model that generates

MODEL_UNAVAILABLE_RETRY_AFTER_S = 5.0  # a lost worker restarts, or placement moves its models, in seconds


def model_unavailable(model_id: str) -> Unavailable:
    """The error of a request for ``model_id`` when no live worker serves it (503 with Retry-After)."""
    return Unavailable(
        f"model '{model_id}' is not loaded on any live worker (see GET /v1/models for placements)",
        code="model_unavailable",
        retry_after=MODEL_UNAVAILABLE_RETRY_AFTER_S,
    )


OVERLOADED_RETRY_AFTER_S = 1.0


class Overloaded(RemoteError):
    """A bounded queue is full: try again shortly (HTTP 429)."""

    def __init__(self, message: str, retry_after: float = OVERLOADED_RETRY_AFTER_S) -> None:
        super().__init__("overloaded", message, 429, retry_after)


class DeadlineExceeded(RemoteError):
    def __init__(self, message: str) -> None:
        super().__init__("deadline_exceeded", message, 504)
