"""Decoding a JSON request body without trusting it: UTF-8, a bounded nesting depth, then JSON.

Litestar decodes ``data`` bodies with msgspec, which recurses once per level of nesting: a body
nested a thousand deep ends in a ``RecursionError`` (a 500), and bytes that are not UTF-8 inside
a value nobody reads pass unchecked. The gateway's request class decodes bodies here instead:
each problem is a 400 in the OpenAI error shape that names it (a ``NaN`` or ``Infinity``, which
JSON has not, by the key path of the field it is in).

A body is decoded once, straight into the handler's request type, strictly (no ``"1"`` for 1, no
``0`` for false), so the gateway accepts only what its OpenAPI schema says; the type's bounds
(``api_gateway.bounds``) are enforced in the same pass. Litestar takes the decoded request as it
is. Only a body that fails goes through the slower path that finds what to say about it.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, TypeVar

import msgspec
from litestar import Request
from litestar.exceptions import ValidationException

from api_gateway.bounds import bound_of, out_of_bounds
from api_gateway.errors import ApiError

S = TypeVar("S", bound=msgspec.Struct)
_BOUND = re.compile(r"^Expected `\w+` (?:>=|<=|>|<) ")  # msgspec's message for a value out of its Meta bounds
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
    check_text(body, max_depth)
    try:
        return msgspec.json.decode(body)
    except msgspec.DecodeError as exc:
        raise not_finite_error(body) or ApiError(
            400, f"the request body is not valid JSON ({exc})", code="invalid_json"
        ) from None
    except RecursionError:  # the decoder's own limit, below ours when the stack is already deep
        raise ApiError(400, "the request body nests arrays and objects too deeply", code="too_deep") from None


class _NotFinite:
    """Where Python's JSON parser met ``NaN``, ``Infinity`` or ``-Infinity``, or a number beyond a float's range."""

    def __init__(self, text: str) -> None:
        self.text = text

    def problem(self) -> str:
        if self.text in ("NaN", "Infinity", "-Infinity"):
            return f"{self.text} is not a valid number (JSON has no NaN or Infinity)"
        return f"{self.text} is not a valid number (beyond the range of a float)"


def _float_or_not_finite(text: str) -> float | _NotFinite:
    number = float(text)
    return number if math.isfinite(number) else _NotFinite(text)


def not_finite_error(body: bytes) -> ApiError | None:
    """The 400 for a body msgspec refused because a number in it is not finite, naming its key path;
    None when that is not why. Python's parser reads ``NaN`` and ``Infinity`` (msgspec and JSON do
    not), so it can say where they are. Only a body msgspec refused comes here: a valid one is
    parsed once."""
    try:
        value = json.loads(body, parse_constant=_NotFinite, parse_float=_float_or_not_finite)
    except (ValueError, RecursionError):  # malformed otherwise: msgspec's message says where
        return None
    found = _first_not_finite(value, "")
    if found is None:
        return None
    path, number = found
    where = f"'{path}'" if path else "the request body"
    return ApiError(400, f"invalid value for {where}: {number.problem()}", code="invalid_value", param=path or None)


def _first_not_finite(value: Any, path: str) -> tuple[str, _NotFinite] | None:
    """The key path (``messages[0].content``, as the other 400s name a parameter) of the first non-finite
    number in ``value``, with it. Recursive: the depth is bounded by :data:`MAX_DEPTH` by now."""
    if isinstance(value, _NotFinite):
        return path, value
    items: list[tuple[str, Any]] = []
    if isinstance(value, dict):
        items = [(f"{path}.{key}" if path else key, item) for key, item in value.items()]
    elif isinstance(value, list):
        items = [(f"{path}[{i}]", item) for i, item in enumerate(value)]
    for item_path, item in items:
        found = _first_not_finite(item, item_path)
        if found is not None:
            return found
    return None


def check_text(body: bytes, max_depth: int = MAX_DEPTH) -> None:
    """A 400 unless the body is UTF-8 nested at most ``max_depth`` levels deep."""
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


def decode_request(body: bytes, target: type[S]) -> S:
    """The body as a ``target``, decoded once and strictly; or the 400 that names what is wrong."""
    check_text(body)
    try:
        return msgspec.json.decode(body, type=target)
    except (msgspec.ValidationError, RecursionError):
        pass  # below: a number with no fraction for an integer, or a clear 400
    except msgspec.DecodeError:
        decode_json_body(body)  # raises the 400 that says why (NaN, malformed)
        raise
    return conform(decode_json_body(body), target)


def conform(value: Any, target: type[S]) -> S:
    """``value`` as a ``target`` without conversions (no strings for numbers, no numbers for
    booleans; a number with no fraction, such as ``2.0``, is an integer, as JSON Schema has it);
    else the 400 for a value out of its bounds (``api_gateway.bounds``), or Litestar's
    ``ValidationException``, its 400 for any other invalid body."""
    try:
        return msgspec.convert(_whole_numbers_as_ints(value), target, strict=True)
    except msgspec.ValidationError as exc:
        text, _, where = str(exc).partition(" - at `$")
        key = where.rstrip("`").lstrip(".") or "data"  # Litestar's key: the body itself is "data"
        meta = bound_of(target, key) if _BOUND.match(text) else None
        if meta is not None and isinstance(value, dict):
            raise ApiError(400, out_of_bounds(key, meta, value.get(key)), code="invalid_value", param=key) from None
        raise ValidationException(detail=text, extra=[{"message": text, "key": key, "source": "body"}]) from None


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
        body = await self.body() or b"null"
        data = self.route_handler.parsed_fn_signature.parameters.get("data")
        if data is not None and isinstance(data.annotation, type) and issubclass(data.annotation, msgspec.Struct):
            return decode_request(body, data.annotation)
        return decode_json_body(body)
