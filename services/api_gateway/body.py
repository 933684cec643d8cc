"""Decoding a JSON request body without trusting it: UTF-8, a bounded nesting depth, then JSON.

Litestar decodes ``data`` bodies with msgspec, which recurses once per level of nesting: a body
nested a thousand deep ends in a ``RecursionError`` (a 500), and bytes that are not UTF-8 inside
a value nobody reads pass unchecked. The gateway's request class decodes bodies here instead:
each problem is a 400 in the OpenAI error shape that names it. Litestar then converts the
value to the handler's type laxly (``"1"`` for 1, ``0`` for false): the gateway checks it
strictly first, so that it accepts only what its OpenAPI schema says.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec
from litestar import Request
from litestar.exceptions import ValidationException

from api_gateway.errors import ApiError

MAX_DEPTH = 64  # levels of arrays and objects: an OpenAI request needs about 6 (tool schemas, more)

_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')  # a JSON string, escapes included
_INNERMOST = re.compile(rb"\[[^\[\]{}]*\]|\{[^\[\]{}]*\}")  # an array or object with none inside


def nested_deeper_than(body: bytes, limit: int) -> bool:
    """Whether the JSON text nests arrays and objects more than ``limit`` levels deep.

    Iterative (no recursion): the strings are blanked out, then the innermost arrays and
    objects are removed one level per pass. Unbalanced brackets are not "too deep": the
    JSON decoder reports them as malformed.
    """
    if body.count(b"[") + body.count(b"{") <= limit:
        return False
    text = _STRING.sub(b'""', body)
    for _ in range(limit):
        text, removed = _INNERMOST.subn(b"0", text)
        if not removed:
            return False
    return _INNERMOST.search(text) is not None


def decode_json_body(body: bytes, max_depth: int = MAX_DEPTH) -> Any:
    """The body as Python values (msgspec's builtins), or a 400 naming what is wrong with it."""
    try:
        body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ApiError(
            400, f"the request body is not valid UTF-8 ({exc.reason} at byte {exc.start})", code="invalid_encoding"
        ) from None
    if nested_deeper_than(body, max_depth):
        raise ApiError(
            400, f"the request body nests arrays and objects more than {max_depth} levels deep", code="too_deep"
        )
    try:
        return msgspec.json.decode(body)
    except msgspec.DecodeError as exc:
        raise ApiError(400, f"the request body is not valid JSON ({exc})", code="invalid_json") from None
    except RecursionError:  # the decoder's own limit, below ours when the stack is already deep
        raise ApiError(400, "the request body nests arrays and objects too deeply", code="too_deep") from None


def conform(value: Any, target: Any) -> Any:
    """``value``, if it is a ``target`` without conversions (no strings for numbers, no numbers for
    booleans; a number with no fraction, such as ``2.0``, is an integer, as JSON Schema has it);
    else Litestar's ``ValidationException``, its 400 for any invalid body."""
    try:
        msgspec.convert(value, target, strict=True)
    except msgspec.ValidationError:
        value = _whole_numbers_as_ints(value)
        try:
            msgspec.convert(value, target, strict=True)
        except msgspec.ValidationError as exc:
            text, _, where = str(exc).partition(" - at `$")
            key = where.rstrip("`").lstrip(".") or "data"  # Litestar's key: the body itself is "data"
            raise ValidationException(detail=text, extra=[{"message": text, "key": key, "source": "body"}]) from None
    return value


def _whole_numbers_as_ints(value: Any) -> Any:
    """Recursive: the depth is bounded by :data:`MAX_DEPTH` by now."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [_whole_numbers_as_ints(v) for v in value]
    if isinstance(value, dict):
        return {k: _whole_numbers_as_ints(v) for k, v in value.items()}
    return value


class GatewayRequest(Request[Any, Any, Any]):
    """Litestar's request, with JSON bodies decoded by :func:`decode_json_body` and checked strictly
    against the handler's ``data`` type."""

    async def json(self) -> Any:
        value = decode_json_body(await self.body() or b"null")
        data = self.route_handler.parsed_fn_signature.parameters.get("data")
        if data is not None and isinstance(data.annotation, type) and issubclass(data.annotation, msgspec.Struct):
            return conform(value, data.annotation)
        return value
