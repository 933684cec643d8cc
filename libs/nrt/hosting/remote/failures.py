"""A remote endpoint's failures as clear errors for the client, naming the endpoint.

=========================  ====================================================================
the endpoint               the client gets
=========================  ====================================================================
401, 403                   502 ``remote_key_refused``: the endpoint refused this cluster's key
429                        429 ``remote_rate_limited``, the endpoint's ``Retry-After`` passed on
400, 413, 422              400 ``remote_rejected``: the endpoint's reason
408, 504, no answer        504 ``remote_timeout``
other 4xx, 5xx             502 ``remote_failed`` (a ``Retry-After`` passed on)
no connection              502 ``remote_unreachable``, after the connect retries
=========================  ====================================================================
"""

from __future__ import annotations

from collections.abc import Mapping
from email.utils import parsedate_to_datetime
from time import time

import httpx
import msgspec

from nrt.adapters.bus.errors import RemoteError
from nrt.hosting.model_sources import RemoteEndpoint

DETAIL_CHARS = 300  # how much of an endpoint's error body a message quotes
RATE_LIMIT_RETRY_AFTER_S = 1.0  # when a 429 says nothing about when to come back

# Anthropic's error types (in an error body or a streamed ``error`` event) and their HTTP statuses.
ANTHROPIC_ERROR_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}


class _Error(msgspec.Struct):
    message: str = ""
    type: str | None = None


class _ErrorBody(msgspec.Struct):
    error: _Error | str


def where(endpoint: RemoteEndpoint) -> str:
    return f"the remote endpoint {endpoint.base_url} (model '{endpoint.model}')"


def detail_of(body: bytes) -> str:
    """The message in an OpenAI or Anthropic error body (``{"error": {"message": ...}}``), else the body's start."""
    try:
        error = msgspec.json.decode(body, type=_ErrorBody).error
    except (msgspec.DecodeError, msgspec.ValidationError):
        return body.decode(errors="replace").strip()[:DETAIL_CHARS] or "(no detail)"
    text = error if isinstance(error, str) else error.message
    return text[:DETAIL_CHARS] or "(no detail)"


def retry_after_of(headers: Mapping[str, str]) -> float | None:
    """The endpoint's ``Retry-After`` in seconds (it may be a number or an HTTP date); None without one."""
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time())
    except (TypeError, ValueError):
        return None


def http_failure(endpoint: RemoteEndpoint, status: int, detail: str, retry_after: float | None = None) -> RemoteError:
    """The error for an endpoint that answered HTTP ``status`` (``detail``: its reason)."""
    name = where(endpoint)
    if status in (401, 403):
        key = f" (from ${endpoint.api_key_env})" if endpoint.api_key_env else " (it was sent none)"
        return RemoteError(
            "remote_key_refused", f"{name} refused this cluster's API key{key}: HTTP {status}: {detail}", 502
        )
    if status == 429:
        return RemoteError(
            "remote_rate_limited",
            f"{name} is limiting this cluster's requests: HTTP 429: {detail}",
            429,
            retry_after if retry_after is not None else RATE_LIMIT_RETRY_AFTER_S,
        )
    if status in (400, 413, 422):
        return RemoteError("remote_rejected", f"{name} rejected the request: HTTP {status}: {detail}", 400)
    if status in (408, 504):
        return RemoteError("remote_timeout", f"{name} timed out: HTTP {status}: {detail}", 504)
    return RemoteError("remote_failed", f"{name} failed: HTTP {status}: {detail}", 502, retry_after)


def status_failure(endpoint: RemoteEndpoint, status: int, body: bytes, headers: Mapping[str, str]) -> RemoteError:
    """The error for an endpoint's HTTP error answer."""
    return http_failure(endpoint, status, detail_of(body), retry_after_of(headers))


def anthropic_failure(endpoint: RemoteEndpoint, error_type: str, message: str) -> RemoteError:
    """An Anthropic error (a streamed ``error`` event) as the error for its HTTP status."""
    status = ANTHROPIC_ERROR_STATUS.get(error_type, 500)
    return http_failure(endpoint, status, f"{error_type}: {message}"[:DETAIL_CHARS])


def timed_out(endpoint: RemoteEndpoint, seconds: float, cause: Exception) -> RemoteError:
    """No answer in time: ``seconds`` without a byte (a read), or a write or pool wait that timed out."""
    if isinstance(cause, httpx.ReadTimeout):
        return RemoteError("remote_timeout", f"{where(endpoint)} sent nothing for {seconds:g} s", 504)
    return RemoteError("remote_timeout", f"{where(endpoint)} timed out: {type(cause).__name__}: {cause}", 504)


def unreachable(endpoint: RemoteEndpoint, attempts: int, cause: Exception) -> RemoteError:
    tries = "attempt" if attempts == 1 else "attempts"
    return RemoteError(
        "remote_unreachable",
        f"could not connect to {where(endpoint)} after {attempts} {tries}: {type(cause).__name__}: {cause}",
        502,
    )


def broken(endpoint: RemoteEndpoint, cause: Exception) -> RemoteError:
    """The connection failed after the request was sent: not retried (the endpoint may be generating)."""
    return RemoteError(
        "remote_failed",
        f"the connection to {where(endpoint)} failed after the request was sent: {type(cause).__name__}: {cause}",
        502,
    )


def bad_answer(endpoint: RemoteEndpoint, problem: str) -> RemoteError:
    return RemoteError("remote_bad_answer", f"{where(endpoint)} sent an answer this worker cannot read: {problem}", 502)
