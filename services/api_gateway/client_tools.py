"""Client tools at the gateway: the declared tools and the tool choice in, the wire's ``Tools`` out, or a
400 naming the problem; an earlier turn's calls and a tool's result as the conversation's text. Pure.

OpenAI's ``tools`` / ``tool_choice`` / ``parallel_tool_calls`` and Anthropic's ``tools`` / ``tool_choice``
become one ``nrt.core.protocol.Tools``. The worker describes the tools to the model and constrains its
answer to calls of them (``nrt.core.tool_calls``); the gateway parses the calls back out of the answer
(``api_gateway.shaping``, ``api_gateway.anthropic_shaping``). Whether the grammar engine can compile a
tool's parameters is the worker's call: one it cannot is a 400 (``invalid_response_format``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from api_gateway.errors import ApiError
from api_gateway.response_format import NAME, missing, schema_text
from nrt.core.protocol import ToolChoice, ToolFunction, Tools
from nrt.core.tool_calls import calls_text

CHOICES: dict[str, ToolChoice] = {"auto": "auto", "none": "none", "required": "required"}
NO_PARAMETERS = '{"type": "object", "properties": {}}'


def declared_tools(
    given: Sequence[tuple[str, str | None, Any]],
    choice: ToolChoice | None,
    function: str | None,
    parallel: bool | None,
    *,
    param: str = "tools",
    choice_param: str = "tool_choice",
) -> Tools | None:
    """The request's tools from ``(name, description, parameters schema)`` triples; None when it declares
    none (then ``auto`` and ``none`` ask for text, and ``required`` or a named function is a 400: there is
    nothing to call)."""
    if not given:
        if choice == "required" or function is not None:
            raise ApiError(
                400,
                f"'{choice_param}' asks for a tool call but the request declares no '{param}'",
                code="invalid_value",
                param=choice_param,
            )
        return None
    functions: list[ToolFunction] = []
    for i, (name, description, parameters) in enumerate(given):
        where = f"{param}[{i}]"
        if not NAME.fullmatch(name):
            raise ApiError(
                400,
                f"{where} name must be 1-64 letters, digits, underscores or dashes, got {name[:80]!r}",
                code="invalid_value",
                param=f"{where}.name",
            )
        if any(f.name == name for f in functions):
            raise ApiError(400, f"{where} declares '{name}' a second time", code="invalid_value", param=where)
        schema = NO_PARAMETERS if parameters is None else schema_text(parameters, f"{where}.parameters")
        functions.append(ToolFunction(name=name, description=description or "", parameters=schema))
    if function is not None and all(f.name != function for f in functions):
        valid = ", ".join(f"'{f.name}'" for f in functions)
        raise ApiError(
            400,
            f"'{choice_param}' names the function '{function}', which '{param}' does not declare; declared: {valid}",
            code="invalid_value",
            param=choice_param,
        )
    return Tools(
        functions=tuple(functions),
        choice="required" if function is not None else (choice or "auto"),
        function=function,
        parallel=True if parallel is None else parallel,
    )


def openai_choice(value: Any) -> tuple[ToolChoice | None, str | None]:
    """OpenAI's ``tool_choice``: a mode (``auto``, ``none``, ``required``) or a named function."""
    if value is None:
        return None, None
    if isinstance(value, str):
        chosen = CHOICES.get(value)
        if chosen is None:
            valid = ", ".join(f"'{c}'" for c in CHOICES)
            raise ApiError(
                400,
                f"'tool_choice' '{value[:40]}' is not supported; valid: {valid} or a named function",
                code="invalid_value",
                param="tool_choice",
            )
        return chosen, None
    kind, function = getattr(value, "type", None), getattr(value, "function", None)
    if kind != "function":
        raise ApiError(
            400,
            f"'tool_choice' of type '{kind}' is not supported; name a function: "
            '{"type": "function", "function": {"name": ...}}',
            code="invalid_value",
            param="tool_choice.type",
        )
    if function is None:
        raise missing("tool_choice.function")
    return "required", str(function.name)


def earlier_calls(content: str, calls: Sequence[tuple[str, str]]) -> str:
    """An assistant turn's text with its calls ``(name, arguments)`` written as the model writes them."""
    written = calls_text(calls)
    return f"{content}\n{written}" if content and written else content or written


def arguments_text(value: Any) -> str:
    """A call's arguments as JSON text (Anthropic sends them as an object), laid out as the model writes
    them (``", "`` and ``": "``, the keys in their order), so the conversation's text is the one it wrote."""
    return json.dumps(value if value is not None else {}, ensure_ascii=False)
