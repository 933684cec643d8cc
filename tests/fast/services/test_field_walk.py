"""Nothing silently ignored (issue 29 item 4): every field of the published request schemas, walked.

The field names come from the installed ``openai`` and ``anthropic`` packages' own request
TypedDicts (offline). Each is in a table here: ``Honoured`` (the gateway carries it into the
call it routes, checked below, and the test that shows the effect end to end) or ``Refused`` (a
value that asks for what NRT cannot do: the validator answers 400 naming the field). A field the
installed package has and the table lacks fails the walk, and so does a field the gateway's
request type declares and the table lacks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pytest
from anthropic.types import message_create_params
from litestar.exceptions import ValidationException
from openai.types.chat import completion_create_params

from api_gateway.anthropic_types import MessagesRequest
from api_gateway.anthropic_validate import validate_messages
from api_gateway.body import decode_request
from api_gateway.errors import ApiError, from_http_exception
from api_gateway.openai_types import ChatCompletionRequest
from api_gateway.validate import ChatCall, validate_chat
from nrt.core.protocol import ChatMessage, ResponseFormat

TESTS = Path(__file__).resolve().parents[2]
USER = {"role": "user", "content": "hello"}


@dataclass(frozen=True)
class Honoured:
    value: Any  # a value to send
    reaches: Callable[[ChatCall], bool]  # the routed call carries it
    shown_by: str  # "path::test" that shows its effect on a running stack (or on the pure path)
    alongside: tuple[tuple[str, Any], ...] = ()  # the fields it needs with it


@dataclass(frozen=True)
class Refused:
    value: Any  # a value that asks for what NRT cannot do: a 400 naming the field


def _sampling(**expected: Any) -> Callable[[ChatCall], bool]:
    return lambda call: all(getattr(call.params, name) == value for name, value in expected.items())


OPENAI_DETAILS = "integration/gateway/test_openai_details.py"
OPENAI_SAMPLING = "integration/gateway/test_sampling_fields.py"
OPENAI_TOOLS = "integration/gateway/test_client_tools.py"
OPENAI_FIELDS: dict[str, Honoured | Refused] = {
    "model": Honoured(
        "billing",
        lambda c: c.model == "billing",
        "integration/gateway/test_chat_e2e.py::test_direct_calls_skip_classification",
    ),
    "messages": Honoured(
        [{"role": "developer", "content": "be brief"}, USER],
        lambda c: c.messages == (ChatMessage("system", "be brief"), ChatMessage("user", "hello")),
        "fast/services/test_validate.py::test_a_valid_request",
    ),
    "stream": Honoured(
        True, lambda c: c.stream, OPENAI_DETAILS + "::test_include_usage_ends_the_stream_with_a_usage_chunk"
    ),
    "stream_options": Honoured(
        {"include_usage": True},
        lambda c: c.include_usage,
        OPENAI_DETAILS + "::test_include_usage_ends_the_stream_with_a_usage_chunk",
    ),
    "max_tokens": Honoured(7, _sampling(max_tokens=7), OPENAI_SAMPLING + "::test_max_tokens_and_max_completion_tokens"),
    "max_completion_tokens": Honoured(
        5, _sampling(max_tokens=5), OPENAI_SAMPLING + "::test_max_tokens_and_max_completion_tokens"
    ),
    "temperature": Honoured(
        0.5, _sampling(temperature=0.5), OPENAI_DETAILS + "::test_a_seed_makes_a_sampled_answer_reproducible"
    ),
    "top_p": Honoured(0.9, _sampling(top_p=0.9), OPENAI_DETAILS + "::test_a_seed_makes_a_sampled_answer_reproducible"),
    "seed": Honoured(3, _sampling(seed=3), OPENAI_DETAILS + "::test_a_seed_makes_a_sampled_answer_reproducible"),
    "stop": Honoured(["\n"], _sampling(stop=("\n",)), OPENAI_SAMPLING + "::test_stop_ends_the_answer"),
    "user": Honoured(
        "alice",
        lambda c: c.session_id == "alice",
        "integration/gateway/test_chat_e2e.py::test_a_session_id_reaches_the_worker_and_its_kv_is_reused",
    ),
    "response_format": Honoured(
        {"type": "json_object"},
        _sampling(response_format=ResponseFormat(type="json_object")),
        "integration/gateway/test_structured_outputs.py::test_json_object_and_a_free_request_side_by_side",
    ),
    "presence_penalty": Honoured(
        1.5, _sampling(presence_penalty=1.5), OPENAI_SAMPLING + "::test_penalties_change_the_greedy_answer"
    ),
    "frequency_penalty": Honoured(
        -0.5, _sampling(frequency_penalty=-0.5), OPENAI_SAMPLING + "::test_penalties_change_the_greedy_answer"
    ),
    "logit_bias": Honoured(
        {"17": 100, "3": -100.0},
        _sampling(logit_bias=((3, -100.0), (17, 100.0))),
        OPENAI_SAMPLING + "::test_logit_bias_forces_a_token",
    ),
    "logprobs": Honoured(True, _sampling(logprobs=True), OPENAI_SAMPLING + "::test_logprobs_match_the_log_softmax"),
    "top_logprobs": Honoured(
        3,
        _sampling(logprobs=True, top_logprobs=3),
        OPENAI_SAMPLING + "::test_logprobs_match_the_log_softmax",
        alongside=(("logprobs", True),),
    ),
    "n": Refused(2),  # 1 (or absent) is what NRT does; more choices per request are not batched yet
    "tools": Honoured(
        [{"type": "function", "function": {"name": "f"}}],
        lambda c: c.params.tools is not None and [f.name for f in c.params.tools.functions] == ["f"],
        OPENAI_TOOLS + "::test_required_answers_with_calls_valid_against_their_schemas",
    ),
    "tool_choice": Honoured(
        "required",
        lambda c: c.params.tools is not None and c.params.tools.choice == "required",
        OPENAI_TOOLS + "::test_required_answers_with_calls_valid_against_their_schemas",
        alongside=(("tools", [{"type": "function", "function": {"name": "f"}}]),),
    ),
    "parallel_tool_calls": Honoured(
        False,
        lambda c: c.params.tools is not None and not c.params.tools.parallel,
        OPENAI_TOOLS + "::test_a_named_function_is_the_one_called_once_without_parallel_calls",
        alongside=(("tools", [{"type": "function", "function": {"name": "f"}}]),),
    ),
    "functions": Refused([{"name": "f"}]),
    "function_call": Refused("auto"),
    "service_tier": Refused("flex"),
    "store": Refused(True),
    "metadata": Refused({"k": "v"}),
    "modalities": Refused(["text", "audio"]),
    "audio": Refused({"voice": "alloy", "format": "wav"}),
    "prediction": Refused({"type": "content", "content": "x"}),
    "web_search_options": Refused({}),
    "reasoning_effort": Refused("low"),
    "verbosity": Refused("low"),
    "moderation": Refused({"type": "auto"}),
    "prompt_cache_key": Refused("k"),
    "prompt_cache_options": Refused({}),
    "prompt_cache_retention": Refused("24h"),
    "safety_identifier": Refused("u-1"),
}

ANTHROPIC_MESSAGES = "integration/gateway/test_anthropic_messages.py"
ANTHROPIC_TOOLS = "integration/gateway/test_anthropic_tools.py"
ANTHROPIC_FIELDS: dict[str, Honoured | Refused] = {
    "model": Honoured(
        "billing",
        lambda c: c.model == "billing",
        ANTHROPIC_MESSAGES + "::test_a_direct_message_has_only_text_and_takes_the_system_field",
    ),
    "max_tokens": Honoured(9, _sampling(max_tokens=9), ANTHROPIC_MESSAGES + "::test_top_k_and_metadata_user_id_reach_"),
    "messages": Honoured(
        [USER],
        lambda c: c.messages[-1] == ChatMessage("user", "hello"),
        ANTHROPIC_MESSAGES + "::test_a_routed_message_shows_the_hop_as_a_tool_use_block",
    ),
    "system": Honoured(
        "be brief",
        lambda c: c.messages[0] == ChatMessage("system", "be brief"),
        ANTHROPIC_MESSAGES + "::test_a_direct_message_has_only_text_and_takes_the_system_field",
    ),
    "stop_sequences": Honoured(
        ["\n"], _sampling(stop=("\n",)), ANTHROPIC_MESSAGES + "::test_a_client_stop_sequence_ends_the_text_and_is_named"
    ),
    "stream": Honoured(True, lambda c: c.stream, ANTHROPIC_MESSAGES + "::test_a_routed_stream_sends_anthropics_event_"),
    "metadata": Honoured(
        {"user_id": "alice"},
        lambda c: c.session_id == "alice",
        ANTHROPIC_MESSAGES + "::test_top_k_and_metadata_user_id_reach_the_worker",
    ),
    "output_config": Honoured(
        {"format": {"type": "json_schema", "schema": {"type": "object"}}},
        lambda c: c.params.response_format is not None and c.params.response_format.type == "json_schema",
        "fast/services/test_response_format.py::test_anthropic_output_config_format_is_honoured",
    ),
    # not in the installed package's schema any more, but in older ones and in clients' extra_body
    "temperature": Honoured(0.5, _sampling(temperature=0.5), ANTHROPIC_MESSAGES + "::test_a_client_stop_sequence_"),
    "top_p": Honoured(0.9, _sampling(top_p=0.9), ANTHROPIC_MESSAGES + "::test_top_k_and_metadata_user_id_reach_"),
    "top_k": Honoured(1, _sampling(top_k=1), ANTHROPIC_MESSAGES + "::test_top_k_and_metadata_user_id_reach_the_worker"),
    "output_format": Honoured(
        {"type": "json_schema", "schema": {"type": "object"}},
        lambda c: c.params.response_format is not None and c.params.response_format.type == "json_schema",
        "fast/services/test_response_format.py::test_anthropic_output_config_format_is_honoured",
    ),
    "tools": Honoured(
        [{"name": "f", "input_schema": {"type": "object"}}],
        lambda c: c.params.tools is not None and [f.name for f in c.params.tools.functions] == ["f"],
        ANTHROPIC_TOOLS + "::test_any_answers_with_tool_use_blocks_valid_against_their_schemas",
    ),
    "tool_choice": Honoured(
        {"type": "any"},
        lambda c: c.params.tools is not None and c.params.tools.choice == "required",
        ANTHROPIC_TOOLS + "::test_any_answers_with_tool_use_blocks_valid_against_their_schemas",
        alongside=(("tools", [{"name": "f", "input_schema": {"type": "object"}}]),),
    ),
    "thinking": Refused({"type": "enabled", "budget_tokens": 1024}),
    "service_tier": Refused("priority"),
    "cache_control": Refused({"type": "ephemeral"}),
    "container": Refused("c-1"),
    "diagnostics": Refused({}),
    "inference_geo": Refused("us"),
    "speed": Refused("fast"),
    "user_profile_id": Refused("p-1"),
    "workspace_id": Refused("w-1"),
}


def _schema_fields(typed_dict: Any) -> set[str]:
    return set(typed_dict.__required_keys__ | typed_dict.__optional_keys__)


INSTALLED_OPENAI = _schema_fields(completion_create_params.CompletionCreateParamsStreaming) | _schema_fields(
    completion_create_params.CompletionCreateParamsNonStreaming
)
INSTALLED_ANTHROPIC = _schema_fields(message_create_params.MessageCreateParamsStreaming) | _schema_fields(
    message_create_params.MessageCreateParamsNonStreaming
)


def openai_call(**fields: Any) -> ChatCall:
    body = {"model": "router", "messages": [USER], **fields}
    request = decode_request(msgspec.json.encode(body), ChatCompletionRequest)
    return validate_chat(request, None, max_tokens_limit=1000, max_messages=8)


def anthropic_call(**fields: Any) -> ChatCall:
    body = {"model": "router", "max_tokens": 16, "messages": [USER], **fields}
    request = decode_request(msgspec.json.encode(body), MessagesRequest)
    return validate_messages(request, None, max_tokens_limit=1000, max_messages=8)


SURFACES = {
    "openai": (OPENAI_FIELDS, INSTALLED_OPENAI, ChatCompletionRequest, openai_call),
    "anthropic": (ANTHROPIC_FIELDS, INSTALLED_ANTHROPIC, MessagesRequest, anthropic_call),
}


@pytest.mark.parametrize("surface", SURFACES)
def test_every_installed_schema_field_is_in_the_table(surface: str) -> None:
    table, installed, _, _ = SURFACES[surface]
    assert installed, "the installed package's request TypedDict has no fields: the walk would prove nothing"
    missing = sorted(installed - set(table))
    assert not missing, (
        f"{surface} fields neither honoured nor refused (add them to the gateway and this table): {missing}"
    )


@pytest.mark.parametrize("surface", SURFACES)
def test_every_field_the_gateway_declares_is_in_the_table(surface: str) -> None:
    table, _, request_type, _ = SURFACES[surface]
    declared = set(request_type.__struct_fields__)
    assert declared == set(table), f"declared but not walked: {sorted(declared - set(table))}; " + (
        f"walked but not declared: {sorted(set(table) - declared)}"
    )


def _cases(kind: type) -> list[Any]:
    return [
        pytest.param(surface, name, id=f"{surface}.{name}")
        for surface, (table, _, _, _) in SURFACES.items()
        for name, entry in table.items()
        if isinstance(entry, kind)
    ]


@pytest.mark.parametrize(("surface", "name"), _cases(Honoured))
def test_an_honoured_field_reaches_the_routed_call_and_has_a_test(surface: str, name: str) -> None:
    table, _, _, make = SURFACES[surface]
    entry = table[name]
    assert isinstance(entry, Honoured)
    call = make(**dict(entry.alongside), **{name: entry.value})
    assert entry.reaches(call), f"{surface} '{name}' = {entry.value!r} did not reach the routed call: {call}"
    path, _, test_prefix = entry.shown_by.partition("::")
    source = (TESTS / path).read_text()
    assert f"def {test_prefix}" in source, f"no test '{test_prefix}...' in tests/{path}"


@pytest.mark.parametrize(("surface", "name"), _cases(Refused))
def test_a_refused_field_is_a_400_naming_it(surface: str, name: str) -> None:
    table, _, _, make = SURFACES[surface]
    entry = table[name]
    assert isinstance(entry, Refused)
    with pytest.raises(ApiError) as caught:
        make(**{name: entry.value})
    assert caught.value.status == 400
    assert caught.value.param == name
    assert f"'{name}'" in caught.value.message
    assert caught.value.code in ("unsupported_parameter", "invalid_value")


@pytest.mark.parametrize(
    ("surface", "harmless"),
    [
        (
            "openai",
            {"store": False, "service_tier": "auto", "modalities": ["text"]},
        ),
        ("openai", {"logprobs": False, "top_logprobs": 0, "metadata": {}, "n": 1, "function_call": "none"}),
        ("anthropic", {"thinking": {"type": "disabled"}, "service_tier": "auto", "speed": "standard"}),
    ],
)
def test_a_refused_field_with_a_value_that_asks_for_nothing_is_accepted(surface: str, harmless: dict[str, Any]) -> None:
    _, _, _, make = SURFACES[surface]
    assert make(**harmless).model == "router"


@pytest.mark.parametrize(
    ("surface", "fields", "param"),
    [
        ("openai", {"temprature": 0.5}, "temprature"),
        ("openai", {"stream_options": {"include_usage": True, "chunk_size": 4}}, "stream_options.chunk_size"),
        ("anthropic", {"top_logprobs": 3}, "top_logprobs"),
        ("anthropic", {"metadata": {"user_id": "a", "tenant": "t"}}, "metadata.tenant"),
        ("anthropic", {"output_config": {"effort": "high"}}, "output_config.effort"),
        ("openai", {"stream_options": {"include_obfuscation": True}}, "stream_options.include_obfuscation"),
    ],
)
def test_a_field_outside_the_schema_is_a_400_naming_it(surface: str, fields: dict[str, Any], param: str) -> None:
    _, _, _, make = SURFACES[surface]
    try:
        make(**fields)
    except ValidationException as exc:  # at decoding: Litestar's 400, worded by the gateway's handler
        error = from_http_exception(exc, max_body_bytes=1 << 20)
    except ApiError as exc:
        error = exc
    else:
        pytest.fail(f"{fields} was accepted")
    assert error.status == 400
    assert error.param == param
    assert param in error.message


@pytest.mark.parametrize("field", ["function_call", "audio"])
def test_an_earlier_turns_function_call_and_audio_are_a_400_naming_them(field: str) -> None:
    value: Any = {"name": "f", "arguments": "{}"} if field == "function_call" else {"id": "a"}
    assistant = {"role": "assistant", "content": None, field: value}
    with pytest.raises(ApiError) as caught:
        openai_call(messages=[USER, assistant, USER])
    assert (caught.value.status, caught.value.param) == (400, f"messages[1].{field}")
    assert (
        openai_call(messages=[USER, {"role": "assistant", "content": "ok", "tool_calls": []}, USER]).model == "router"
    )


def test_an_earlier_turns_tool_calls_and_a_tool_result_are_written_into_the_conversation() -> None:
    call = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
    assistant = {"role": "assistant", "content": None, "tool_calls": [call]}
    result = {"role": "tool", "tool_call_id": "call_1", "content": "2"}
    messages = openai_call(messages=[USER, assistant, result]).messages
    assert messages[1:] == (
        ChatMessage("assistant", '<tool_call>{"name": "f", "arguments": {"a": 1}}'),
        ChatMessage("tool", "2"),
    )
    with pytest.raises(ApiError) as caught:
        openai_call(messages=[USER, assistant, {"role": "tool", "content": "2"}])
    assert caught.value.param == "messages[2].tool_call_id"


@pytest.mark.parametrize(
    ("logit_bias", "param", "says"),
    [
        ({"x": 1}, "logit_bias.x", "token ids"),
        ({"-3": 1}, "logit_bias.-3", "token ids"),
        ({"5": 101}, "logit_bias.5", "between -100 and 100, got 101"),
        ({"5": -100.5}, "logit_bias.5", "between -100 and 100"),
    ],
)
def test_a_bad_logit_bias_is_a_400_naming_the_entry(logit_bias: dict[str, Any], param: str, says: str) -> None:
    with pytest.raises(ApiError) as caught:
        openai_call(logit_bias=logit_bias)
    assert (caught.value.status, caught.value.param) == (400, param)
    assert says in caught.value.message


def test_top_logprobs_without_logprobs_is_a_400() -> None:
    with pytest.raises(ApiError) as caught:
        openai_call(top_logprobs=2)
    assert (caught.value.status, caught.value.param) == (400, "top_logprobs")
    with pytest.raises(ApiError) as bounds:
        openai_call(logprobs=True, top_logprobs=21)
    assert (bounds.value.status, bounds.value.param) == (400, "top_logprobs")
    assert "between 0 and 20" in bounds.value.message


@pytest.mark.parametrize("field", ["presence_penalty", "frequency_penalty"])
def test_penalties_outside_their_range_are_a_400(field: str) -> None:
    with pytest.raises(ApiError) as caught:
        openai_call(**{field: 2.5})
    assert (caught.value.status, caught.value.param) == (400, field)
    assert "between -2 and 2" in caught.value.message
