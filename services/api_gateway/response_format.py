"""Structured outputs at the gateway: a client's response format in, the wire's ``ResponseFormat`` out,
or a 400 naming the problem. Pure.

OpenAI's ``response_format`` (``text``, ``json_object``, ``json_schema``) and Anthropic's
``output_config.format`` (and its older ``output_format``; ``json_schema`` only) become one
``ResponseFormat``: the schema as JSON text, the key of its compiled grammar in the workers' caches
(in the client's key order: the answer writes an object's properties in the schema's order). Whether the grammar engine can compile the schema is the worker's
call: one it cannot compile comes back as an ``invalid_response_format`` error frame, a 400 naming
``response_format`` (``api_gateway.errors``).
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

from api_gateway.errors import ApiError
from nrt.core.protocol import ResponseFormat

NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")  # OpenAI's rule for json_schema.name (fullmatch)
OPENAI_TYPES = ("text", "json_object", "json_schema")


def openai_format(
    type_: str, name: str | None, schema: Any, *, has_json_schema: bool, param: str = "response_format"
) -> ResponseFormat | None:
    """OpenAI's ``response_format``: None for ``text``; raises ApiError (400) for anything invalid."""
    if has_json_schema and type_ != "json_schema":  # refused, not ignored
        raise ApiError(
            400,
            f"{param}.json_schema is only for {param}.type 'json_schema', not '{type_}'",
            code="invalid_value",
            param=f"{param}.json_schema",
        )
    if type_ == "text":
        return None
    if type_ == "json_object":
        return ResponseFormat(type="json_object")
    if type_ != "json_schema":
        valid = ", ".join(f"'{t}'" for t in OPENAI_TYPES)
        raise ApiError(
            400, f"{param}.type '{type_}' is not supported; valid types: {valid}", code="invalid_value", param=param
        )
    where = f"{param}.json_schema"
    if not has_json_schema:
        raise missing(where)
    if name is None:
        raise missing(f"{where}.name")
    if not NAME.fullmatch(name):
        raise ApiError(
            400,
            f"{where}.name must be 1-64 letters, digits, underscores or dashes, got {name[:80]!r}",
            code="invalid_value",
            param=f"{where}.name",
        )
    return ResponseFormat(type="json_schema", schema=schema_text(schema, f"{where}.schema"), name=name)


def anthropic_format(type_: str, schema: Any, param: str) -> ResponseFormat:
    """Anthropic's output format (``output_config.format``): a JSON schema, the only type it has."""
    if type_ != "json_schema":
        raise ApiError(
            400,
            f"{param}.type '{type_}' is not supported; valid type: 'json_schema'",
            code="invalid_value",
            param=param,
        )
    return ResponseFormat(type="json_schema", schema=schema_text(schema, f"{param}.schema"))


def schema_text(schema: Any, param: str) -> str:
    """The schema as JSON text (its keys in the client's order: the answer's properties follow the
    schema's order); a 400 unless it is a JSON object."""
    if schema is None:
        raise missing(param)
    if not isinstance(schema, dict):
        raise ApiError(
            400,
            f"{param} must be a JSON Schema object, got {type(schema).__name__}",
            code="invalid_value",
            param=param,
        )
    return msgspec.json.encode(schema).decode()


def missing(param: str) -> ApiError:
    return ApiError(400, f"missing required parameter '{param}'", code="missing_required_parameter", param=param)
