"""Every error the gateway answers with, in the OpenAI error shape."""

from __future__ import annotations

import logging
import math
from typing import Any

from litestar import Request, Response
from litestar.exceptions import (
    ClientException,
    HTTPException,
    MethodNotAllowedException,
    NotFoundException,
    ValidationException,
)
from litestar.exceptions.http_exceptions import RequestEntityTooLarge

from api_gateway.openai_types import ErrorDetail, ErrorResponse
from nrt.adapters.bus.errors import (
    INVALID_DIMENSIONS,
    INVALID_LOGIT_BIAS,
    INVALID_RESPONSE_FORMAT,
    NOT_AN_ENCODER,
    RemoteError,
)

log = logging.getLogger("api_gateway")

# a worker's error codes that are about one request parameter: the 400 names it
PARAM_OF_CODE = {  # the request field a worker's error frame is about
    INVALID_RESPONSE_FORMAT: "response_format",
    INVALID_LOGIT_BIAS: "logit_bias",
    INVALID_DIMENSIONS: "dimensions",
    NOT_AN_ENCODER: "model",
}

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    409: "invalid_request_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
}


def error_type(status: int) -> str:
    return _TYPES.get(status, "invalid_request_error" if status < 500 else "server_error")


def retry_after_header(seconds: float) -> str:
    """``Retry-After`` in whole seconds (HTTP allows no fraction), at least 1."""
    return str(max(1, math.ceil(seconds)))


class ApiError(Exception):
    """An error answer: HTTP status, a clear message, the offending parameter and a stable code."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        param: str | None = None,
        headers: dict[str, str] | None = None,
        problems: list[str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.code, self.param = status, message, code, param
        self.headers = headers or {}
        self.problems = problems

    @classmethod
    def from_remote(cls, error: RemoteError) -> ApiError:
        """A bus error frame as an HTTP error: the frame's status passes through (5xx when it is not an error status)."""
        status = error.status if 400 <= error.status <= 599 else 502
        headers = {"Retry-After": retry_after_header(error.retry_after)} if error.retry_after is not None else None
        param = PARAM_OF_CODE.get(error.code)
        return cls(status, error.message, code=error.code, headers=headers, param=param)

    def body(self) -> ErrorResponse:
        return ErrorResponse(
            error=ErrorDetail(
                message=self.message,
                type=error_type(self.status),
                param=self.param,
                code=self.code,
                problems=self.problems,
            )
        )

    def response(self) -> Response[ErrorResponse]:
        return Response(self.body(), status_code=self.status, headers=self.headers)


def from_http_exception(exc: HTTPException, max_body_bytes: int) -> ApiError:
    """Litestar's own errors (decoding, validation, routing, body size) as clear API errors."""
    if isinstance(exc, RequestEntityTooLarge):
        return ApiError(
            413, f"the request body is larger than the limit of {max_body_bytes} bytes", code="request_too_large"
        )
    if isinstance(exc, ValidationException):
        problems = exc.extra if isinstance(exc.extra, list) else []
        first = problems[0] if problems and isinstance(problems[0], dict) else {}
        key, text = str(first.get("key", "")), str(first.get("message", exc.detail))
        if text.startswith("Object missing required field"):
            field = text.split("`")[1] if "`" in text else key
            param = f"{key}.{field}" if key and key not in (field, "data") else field
            return ApiError(
                400, f"missing required parameter '{param}'", code="missing_required_parameter", param=param
            )
        if text.startswith("Object contains unknown field"):
            field = text.split("`")[1] if "`" in text else key
            param = f"{key}.{field}" if key and key not in (field, "data") else field
            return ApiError(
                400,
                f"unknown parameter '{param}': it is not in this API's request schema (see GET /schema/openapi.json)",
                code="unknown_parameter",
                param=param,
            )
        if text == "'data'":
            return ApiError(
                400, "the request body is empty; send a JSON object with 'model' and 'messages'", code="empty_body"
            )
        if key == "data":
            return ApiError(
                400, f"the request body must be a JSON object with 'model' and 'messages' ({text})", code="invalid_type"
            )
        where = f"'{key}': " if key else ""
        return ApiError(400, f"invalid value for {where}{text}", code="invalid_type", param=key or None)
    if isinstance(exc, ClientException) and ("JSON is malformed" in exc.detail or "truncated" in exc.detail):
        return ApiError(400, f"the request body is not valid JSON ({exc.detail})", code="invalid_json")
    if isinstance(exc, NotFoundException):
        return ApiError(404, exc.detail or "not found", code="not_found")
    if isinstance(exc, MethodNotAllowedException):
        return ApiError(405, exc.detail or "method not allowed", code="method_not_allowed", headers=exc.headers)
    return ApiError(exc.status_code, exc.detail, code=None, headers=exc.headers)


def exception_handlers(max_body_bytes: int) -> dict[type[Exception], object]:
    def on_api_error(_: Request[Any, Any, Any], exc: ApiError) -> Response[ErrorResponse]:
        return exc.response()

    def on_http_exception(_: Request[Any, Any, Any], exc: HTTPException) -> Response[ErrorResponse]:
        return from_http_exception(exc, max_body_bytes).response()

    def on_unexpected(request: Request[Any, Any, Any], exc: Exception) -> Response[ErrorResponse]:
        log.exception("%s %s failed", request.method, request.url.path, exc_info=exc)
        return ApiError(500, f"internal error: {type(exc).__name__}", code="internal_error").response()

    return {ApiError: on_api_error, HTTPException: on_http_exception, Exception: on_unexpected}
