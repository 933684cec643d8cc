"""Decoding a JSON request body without trusting it: UTF-8, a bounded nesting depth, then JSON.

Litestar decodes ``data`` bodies with msgspec, which recurses once per level of nesting: a body
nested a thousand deep ends in a ``RecursionError`` (a 500), and bytes that are not UTF-8 inside
a value nobody reads pass unchecked. The gateway's request class decodes bodies here instead:
each problem is a 400 in the OpenAI error shape that names it.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec
from litestar import Request

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


class GatewayRequest(Request[Any, Any, Any]):
    """Litestar's request, with JSON bodies decoded by :func:`decode_json_body`."""

    async def json(self) -> Any:
        return decode_json_body(await self.body() or b"null")
