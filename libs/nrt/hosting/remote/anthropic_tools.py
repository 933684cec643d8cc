"""Client tools on an Anthropic Messages endpoint, in its own wire shape.

The request's tools become Anthropic's ``tools`` / ``tool_choice``; the conversation's calls and results,
which travel in NRT's text format (``nrt.core.tool_calls``), become an assistant turn's ``tool_use``
blocks and a user turn's ``tool_result`` blocks (the results of one turn's calls in one user turn, as the
API asks; ids made here, consistent within the conversation). The endpoint's ``tool_use`` blocks come
back written in NRT's text format (``nrt.hosting.remote.calls_text``).
"""

from __future__ import annotations

import msgspec

from nrt.core.protocol import ChatMessage, Tools
from nrt.core.tool_calls import parse_answer
from nrt.hosting.remote.openai_tools import split_calls

Block = dict[str, object]


def tools_fields(tools: Tools) -> dict[str, object]:
    """The body's tool fields for ``tools``."""
    declared: list[Block] = []
    for f in tools.functions:
        tool: Block = {"name": f.name, "input_schema": msgspec.json.decode(f.parameters)}
        if f.description:
            tool["description"] = f.description
        declared.append(tool)
    kind = {"auto": "auto", "required": "any", "none": "none"}[tools.choice]
    choice: Block = {"type": "tool", "name": tools.function} if tools.function else {"type": kind}
    if choice["type"] != "none":
        choice["disable_parallel_tool_use"] = not tools.parallel
    return {"tools": declared, "tool_choice": choice}


def wire_messages(messages: tuple[ChatMessage, ...]) -> list[dict[str, object]]:
    """The conversation (no system turns) in Anthropic's shape: an assistant turn's calls as ``tool_use``
    blocks, the results that follow as one user turn's ``tool_result`` blocks (with the user's next text)."""
    out: list[dict[str, object]] = []
    pending: list[str] = []
    results: list[Block] = []
    for message in messages:
        if message.role == "tool":
            call_id = pending.pop(0) if pending else f"toolu_{len(out)}_{len(results)}"
            results.append({"type": "tool_result", "tool_use_id": call_id, "content": message.content})
            continue
        if results:
            blocks: list[Block] = [*results]
            if message.role == "user":
                out.append({"role": "user", "content": [*blocks, {"type": "text", "text": message.content}]})
                results = []
                continue
            out.append({"role": "user", "content": blocks})
            results = []
        text, calls = split_calls(message.content) if message.role == "assistant" else (message.content, "")
        parsed = parse_answer(calls).calls if calls else []
        if not parsed:
            out.append({"role": message.role, "content": message.content})
            continue
        pending = [f"toolu_{len(out)}_{i}" for i in range(len(parsed))]
        content: list[Block] = [{"type": "text", "text": text}] if text.strip() else []
        content += [
            {"type": "tool_use", "id": id_, "name": c.name, "input": _input(c.arguments)}
            for id_, c in zip(pending, parsed, strict=True)
        ]
        out.append({"role": "assistant", "content": content})
    if results:
        out.append({"role": "user", "content": results})
    return out


def _input(arguments: str) -> object:
    try:
        value = msgspec.json.decode(arguments)
    except msgspec.DecodeError:
        return {}
    return value if isinstance(value, dict) else {}
