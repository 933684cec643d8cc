"""A tool's parameters' JSON Schema written as a short signature for the model's prompt. Pure.

``{"type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 9}}, "required": ["a"]}``
becomes ``{a: integer 0..9}``: a TypeScript-like type (as OpenAI's own models read their tools), a
fraction of the schema's length, which matters in a small model's context (the tiny test models have
512 tokens of one byte each). The grammar still enforces the whole schema; this only tells the model
what to write. A part it has no short form for is written as compact JSON.
"""

from __future__ import annotations

from typing import Any

import msgspec

_SCALARS = {"string", "integer", "number", "boolean", "null"}


def signature(schema: Any) -> str:
    """The short type of ``schema`` (a decoded JSON Schema)."""
    if not isinstance(schema, dict):
        return _json(schema)
    if "const" in schema:
        return _json(schema["const"])
    if isinstance(schema.get("enum"), list):
        return "|".join(_json(v) for v in schema["enum"]) or "never"
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            return "|".join(signature(s) for s in schema[key])
    kind = schema.get("type")
    if isinstance(kind, list):
        return "|".join(signature({**schema, "type": k}) for k in kind)
    if kind == "object" or (kind is None and isinstance(schema.get("properties"), dict)):
        return _object(schema)
    if kind == "array":
        items = schema.get("items")
        inner = signature(items) if items is not None else "any"
        return f"({inner})[]" if "|" in inner else f"{inner}[]"
    if kind in _SCALARS:
        return str(kind) + (_bounds(schema) if kind in ("string", "integer", "number") else "")
    return _json(schema)


def _object(schema: dict[str, Any]) -> str:
    properties = schema.get("properties") or {}
    if not isinstance(properties, dict):
        return _json(schema)
    required = set(schema.get("required") or ())
    fields = []
    for name, sub in properties.items():
        described = sub.get("description") if isinstance(sub, dict) else None
        note = f" /* {described} */" if isinstance(described, str) and described else ""
        fields.append(f"{name}{'' if name in required else '?'}: {signature(sub)}{note}")
    return "{" + ", ".join(fields) + "}"


def _bounds(schema: dict[str, Any]) -> str:
    low, high = schema.get("minimum"), schema.get("maximum")
    if low is not None or high is not None:
        return f" {_json(low) if low is not None else ''}..{_json(high) if high is not None else ''}"
    longest = schema.get("maxLength")
    if longest is not None:
        return f" (at most {longest} chars)"
    pattern = schema.get("pattern")
    return f" /{pattern}/" if isinstance(pattern, str) else ""


def _json(value: Any) -> str:
    return msgspec.json.encode(value).decode()
