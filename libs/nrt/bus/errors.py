"""Errors that cross the bus as explicit error frames: a code, a message and an HTTP status."""

from __future__ import annotations

import msgspec


class ErrorFrame(msgspec.Struct, frozen=True, kw_only=True):
    code: str  # stable and machine-readable, e.g. "context_window_exceeded"
    message: str  # for a person: what went wrong and what would be valid
    status: int = 500  # the HTTP status a gateway should answer with


class RemoteError(Exception):
    """A failure reported by (or about) the other side of a NATS call."""

    def __init__(self, code: str, message: str, status: int = 500) -> None:
        self.code, self.message, self.status = code, message, status
        super().__init__(f"{code}: {message}")

    def frame(self) -> ErrorFrame:
        return ErrorFrame(code=self.code, message=self.message, status=self.status)

    @classmethod
    def from_frame(cls, frame: ErrorFrame) -> RemoteError:
        return cls(frame.code, frame.message, frame.status)


class BadRequest(RemoteError):
    def __init__(self, message: str, code: str = "bad_request") -> None:
        super().__init__(code, message, 400)


class Unavailable(RemoteError):
    def __init__(self, message: str, code: str = "unavailable") -> None:
        super().__init__(code, message, 503)


class DeadlineExceeded(RemoteError):
    def __init__(self, message: str) -> None:
        super().__init__("deadline_exceeded", message, 504)
