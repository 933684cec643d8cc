"""Nothing silently ignored: the request fields NRT cannot honour, refused with a 400 naming them. Pure.

Every field of OpenAI's and Anthropic's published request schemas is declared on the gateway's
request types (``openai_types.ChatCompletionRequest``, ``anthropic_types.MessagesRequest``), so
none is dropped unseen: the validators honour it or pass it here. A refused field is accepted
only when it is absent or carries a value that asks for nothing NRT does not do (``store: false``,
``service_tier: "auto"``, ``modalities: ["text"]``, ...). ``tests/fast/gateway/test_field_walk.py``
walks the installed ``openai`` and ``anthropic`` packages' request TypedDicts against this.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from api_gateway.errors import ApiError

# field -> (the values that ask for nothing unsupported, why the others are refused)
_FUNCTIONS = "the deprecated function calls are not supported: declare 'tools' (and 'tool_choice')"
OPENAI_REFUSED: dict[str, tuple[tuple[Any, ...], str]] = {
    "functions": (([],), _FUNCTIONS),
    "function_call": (("none",), _FUNCTIONS),
    "service_tier": (("auto", "default"), "this cluster has one service tier: send 'auto' or 'default'"),
    "store": ((False,), "this cluster does not store completions for later retrieval"),
    "metadata": (({},), "metadata is only kept with stored completions, and this cluster stores none"),
    "modalities": ((["text"],), 'the models of this cluster answer in text only: send ["text"]'),
    "audio": ((), "the models of this cluster answer in text only"),
    "prediction": ((), "predicted outputs are not supported"),
    "web_search_options": ((), "the models of this cluster do not search the web"),
    "reasoning_effort": ((), "the models of this cluster are not reasoning models"),
    "verbosity": ((), "the models of this cluster take no verbosity setting"),
    "moderation": ((), "this cluster runs no moderation model"),
    "prompt_cache_key": ((), "use the X-NRT-Session header (or 'user') to keep a conversation's cache"),
    "prompt_cache_options": ((), "use the X-NRT-Session header (or 'user') to keep a conversation's cache"),
    "prompt_cache_retention": ((), "session caches live by the manifest's LRU policy"),
    "safety_identifier": ((), "this cluster keeps no per-user safety record"),
}

ANTHROPIC_REFUSED: dict[str, tuple[tuple[Any, ...], str]] = {
    "thinking": (({"type": "disabled"},), "the models of this cluster do not think before answering"),
    "service_tier": (("auto", "standard_only"), "this cluster has one service tier: send 'auto' or 'standard_only'"),
    "cache_control": ((), "use the X-NRT-Session header (or metadata.user_id) to keep a conversation's cache"),
    "container": ((), "this cluster runs no code-execution containers"),
    "diagnostics": ((), "this cluster returns no diagnostics"),
    "inference_geo": ((), "this cluster's placement is decided by its manifest"),
    "speed": (("standard",), "this cluster has one speed: send 'standard'"),
    "user_profile_id": ((), "this cluster keeps no user profiles"),
    "workspace_id": ((), "this cluster has no workspaces"),
}


def refuse_unsupported(given: Iterable[tuple[str, Any]], table: dict[str, tuple[tuple[Any, ...], str]]) -> None:
    """A 400 naming the first ``(field, value)`` whose value is neither absent (None) nor harmless."""
    for name, value in given:
        harmless, why = table[name]
        if value is None or any(type(value) is type(ok) and value == ok for ok in harmless):
            continue
        accepted = " or ".join(_json(ok) for ok in harmless)
        hint = f" (accepted: absent or {accepted})" if harmless else ""
        raise ApiError(
            400,
            f"'{name}' is not supported: {why}; send the request without it{hint}",
            code="unsupported_parameter",
            param=name,
        )


def _json(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f"'{value}'"
    return str(value).replace("'", '"')
