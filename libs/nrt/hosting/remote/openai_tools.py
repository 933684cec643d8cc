"""Client tools on an OpenAI-compatible endpoint, in its own wire shape.

The request's tools become OpenAI's ``tools`` / ``tool_choice`` / ``parallel_tool_calls``; the
conversation's calls and results, which travel in NRT's text format (``nrt.core.tool_calls``), become
an assistant message's ``tool_calls`` and ``role: "tool"`` messages (each result answers the calls
before it, in order: the ids are made here, consistent within the conversation); and the endpoint's
calls come back written in NRT's text format (``nrt.hosting.remote.calls_text``), so the gateway reads them as it
reads a local model's (an answer is text or calls: an endpoint's text before its calls is dropped).
"""

from __future__ import annotations

import msgspec

from nrt.core.protocol import ChatMessage, Tools
from nrt.core.tool_calls import CALL_OPEN, CALL_SEPARATOR, parse_answer


def tools_fields(tools: Tools) -> dict[str, object]:
    """The body's tool fields for ``tools``."""
    declared = [
        {
            "type": "function",
            "function": {
                "name": f.name,
                "description": f.description,
                "parameters": msgspec.json.decode(f.parameters),
            },
        }
        for f in tools.functions
    ]
    choice: object = {"type": "function", "function": {"name": tools.function}} if tools.function else tools.choice
    return {"tools": declared, "tool_choice": choice, "parallel_tool_calls": tools.parallel}


def wire_messages(messages: tuple[ChatMessage, ...]) -> list[dict[str, object]]:
    """The conversation in OpenAI's shape: an assistant turn's calls as its ``tool_calls``, tool results
    as ``tool`` messages answering them in order."""
    out: list[dict[str, object]] = []
    pending: list[str] = []
    for message in messages:
        if message.role == "tool":
            call_id = pending.pop(0) if pending else f"call_{len(out)}"
            out.append({"role": "tool", "tool_call_id": call_id, "content": message.content})
            continue
        text, calls = split_calls(message.content) if message.role == "assistant" else (message.content, "")
        parsed = parse_answer(calls).calls if calls else []
        if not parsed:
            out.append({"role": message.role, "content": message.content})
            continue
        ids = [f"call_{len(out)}_{i}" for i in range(len(parsed))]
        pending = list(ids)
        wired = [
            {"id": id_, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for id_, c in zip(ids, parsed, strict=True)
        ]
        out.append({"role": "assistant", "content": text or None, "tool_calls": wired})
    return out


def split_calls(content: str) -> tuple[str, str]:
    """An assistant turn's text and its calls (they follow the text, each on a line of its own)."""
    if content.lstrip().startswith(CALL_OPEN):
        return "", content.lstrip()
    at = content.find(CALL_SEPARATOR + CALL_OPEN)
    return (content, "") if at < 0 else (content[:at], content[at + len(CALL_SEPARATOR) :])
