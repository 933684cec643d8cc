"""The Anthropic Messages API wire shapes the gateway speaks (``POST /v1/messages``). Plain msgspec Structs.

Responses and stream events carry their ``type`` as a msgspec tag, so it is always written.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from api_gateway.bounds import AnthropicTemperature, TopK, TopP
from api_gateway.openai_types import NrtInfo

# -- requests ---------------------------------------------------------------------------


class BlockIn(msgspec.Struct, kw_only=True):
    """A text block (``system``, a tool's result); only ``text`` blocks are accepted (others are refused by name)."""

    type: str
    text: str | None = None


class ContentBlockIn(msgspec.Struct, kw_only=True):
    """A message's content block: ``text``; an assistant turn's ``tool_use`` (a call it made: id, name,
    input); a user turn's ``tool_result`` (tool_use_id, content). Other blocks are refused by name."""

    type: str
    text: str | None = None
    id: str | None = None  # tool_use
    name: str | None = None  # tool_use
    input: Any = None  # tool_use: the call's arguments (a JSON object)
    tool_use_id: str | None = None  # tool_result: the call it answers
    content: str | list[BlockIn] | None = None  # tool_result: its text (or text blocks)
    is_error: bool | None = None  # tool_result: the tool failed (its content says how)
    cache_control: Any = None  # accepted and ignored: sessions keep a conversation's cache (X-NRT-Session)


class MessageParam(msgspec.Struct, kw_only=True):
    role: str
    content: str | list[ContentBlockIn]


class Metadata(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    user_id: str | None = None  # used as the conversation id when no X-NRT-Session header is sent


class OutputFormat(msgspec.Struct, kw_only=True):
    """Anthropic's structured output format: ``{"type": "json_schema", "schema": {...}}``."""

    type: str
    schema: Any = None


class OutputConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    format: OutputFormat | None = None  # constrained decoding (api_gateway.response_format)
    effort: Any = None  # refused when given: no model here reasons


class ToolParam(msgspec.Struct, kw_only=True):
    """A client tool: its name, what it does, its input's JSON Schema (``type``: custom, or absent)."""

    name: str
    input_schema: dict[str, Any]
    description: str | None = None
    type: str | None = None  # "custom" (Anthropic's server tools, e.g. bash_20250124, are refused)
    cache_control: Any = None  # accepted and ignored (as on blocks)


class ToolChoiceParam(msgspec.Struct, kw_only=True):
    """``auto`` (text or calls), ``any`` (calls), ``tool`` (the call of ``name``), ``none`` (text)."""

    type: str
    name: str | None = None
    disable_parallel_tool_use: bool | None = None


class MessagesRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``POST /v1/messages``: every field of Anthropic's published request schema is declared (and
    ``temperature`` / ``top_p`` / ``top_k``, which older versions of it publish), so none is dropped
    unseen. Each is honoured or refused with a 400 naming it (``api_gateway.fields``); a field outside
    the schema is a 400 too (unknown parameter)."""

    model: str
    max_tokens: int
    messages: list[MessageParam]
    system: str | list[BlockIn] | None = None
    temperature: AnthropicTemperature | None = None
    top_p: TopP | None = None
    top_k: TopK | None = None
    stop_sequences: list[str] | None = None
    stream: bool = False
    metadata: Metadata | None = None
    output_config: OutputConfig | None = None  # its ``format`` constrains the answer to a JSON schema
    output_format: OutputFormat | None = None  # the same, as the structured-outputs beta first named it
    tools: list[ToolParam] | None = None  # client tools (api_gateway.client_tools)
    tool_choice: ToolChoiceParam | None = None
    # refused unless absent or harmless (api_gateway.fields): typed loosely so that the 400 names them
    thinking: Any = None
    service_tier: Any = None
    cache_control: Any = None
    container: Any = None
    diagnostics: Any = None
    inference_geo: Any = None
    speed: Any = None
    user_profile_id: Any = None
    workspace_id: Any = None


# -- responses --------------------------------------------------------------------------

StopReason = Literal["end_turn", "max_tokens", "stop_sequence", "tool_use"]


class TextBlock(msgspec.Struct, kw_only=True, tag_field="type", tag="text"):
    text: str


class ToolUseBlock(msgspec.Struct, kw_only=True, tag_field="type", tag="tool_use"):
    """A call of a client tool (``toolu_...``), or the router hop: ``dispatch_to_specialist`` with input
    ``{intent, target}`` (only when the request declares no tools)."""

    id: str
    name: str
    input: dict[str, Any]


ContentBlock = TextBlock | ToolUseBlock


class MessageUsage(msgspec.Struct, kw_only=True):
    """Anthropic's usage: ``input_tokens`` are the prompt tokens prefilled, ``cache_read_input_tokens`` those
    whose KV a cache gave (the session's or a shared prefix's); the prompt is both together."""

    input_tokens: int
    output_tokens: int
    cache_read_input_tokens: int = 0


class Message(msgspec.Struct, kw_only=True, tag_field="type", tag="message"):
    id: str
    role: Literal["assistant"] = "assistant"
    model: str
    content: list[ContentBlock]
    stop_reason: StopReason | None
    stop_sequence: str | None
    usage: MessageUsage
    nrt: NrtInfo | None = None  # NRT's own account of the request (as on the OpenAI endpoint)


# -- stream events ----------------------------------------------------------------------


class MessageStart(msgspec.Struct, kw_only=True, tag_field="type", tag="message_start"):
    message: Message


class ContentBlockStart(msgspec.Struct, kw_only=True, tag_field="type", tag="content_block_start"):
    index: int
    content_block: ContentBlock


class TextDelta(msgspec.Struct, kw_only=True, tag_field="type", tag="text_delta"):
    text: str


class InputJsonDelta(msgspec.Struct, kw_only=True, tag_field="type", tag="input_json_delta"):
    partial_json: str


class ContentBlockDelta(msgspec.Struct, kw_only=True, tag_field="type", tag="content_block_delta"):
    index: int
    delta: TextDelta | InputJsonDelta


class ContentBlockStop(msgspec.Struct, kw_only=True, tag_field="type", tag="content_block_stop"):
    index: int


class MessageDeltaBody(msgspec.Struct, kw_only=True):
    stop_reason: StopReason
    stop_sequence: str | None


class MessageDelta(msgspec.Struct, kw_only=True, tag_field="type", tag="message_delta"):
    delta: MessageDeltaBody
    usage: MessageUsage
    nrt: NrtInfo | None = None


class MessageStop(msgspec.Struct, kw_only=True, tag_field="type", tag="message_stop"):
    pass


# -- errors -----------------------------------------------------------------------------


class ErrorDetails(msgspec.Struct, kw_only=True, omit_defaults=True):
    error_code: str  # the gateway's stable code (the one its OpenAI errors carry), e.g. model_not_found
    param: str | None = None  # the offending parameter


class ErrorBody(msgspec.Struct, kw_only=True, omit_defaults=True):
    type: str  # invalid_request_error, authentication_error, not_found_error, ...
    message: str
    details: ErrorDetails | None = None


class ErrorEvent(msgspec.Struct, kw_only=True, tag_field="type", tag="error"):
    """An error answer (``{"type": "error", "error": {...}}``), and the stream's ``error`` event."""

    error: ErrorBody


StreamEvent = MessageStart | ContentBlockStart | ContentBlockDelta | ContentBlockStop | MessageDelta | MessageStop
