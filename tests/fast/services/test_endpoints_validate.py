"""``/v1/embeddings`` and ``/v1/completions`` (pure): validation 400s naming the field, base64 vectors,
the endpoints each model serves, the completion shapes."""

from __future__ import annotations

import base64
import struct
from typing import Any

import msgspec
import pytest
from litestar.exceptions import ValidationException

from api_gateway.body import decode_request
from api_gateway.endpoint_types import CompletionRequest, EmbeddingRequest
from api_gateway.endpoint_validate import MAX_INPUTS, encode_vector, validate_completion, validate_embeddings
from api_gateway.errors import ApiError
from api_gateway.served_endpoints import endpoints_of, require_endpoint
from api_gateway.shaping import Transcript
from api_gateway.text_completions import closing_chunks, sse
from harness import FIXTURES
from nrt.core.manifest import parse_manifest
from nrt.core.protocol import EmbedReply, GenerateChunk, Usage, embed_frames


def embedding(**fields: Any) -> EmbeddingRequest:
    body = {"model": "embedder", "input": "hello", **fields}
    return decode_request(msgspec.json.encode(body), EmbeddingRequest)


def completion(**fields: Any) -> CompletionRequest:
    body = {"model": "billing", "prompt": "Once", **fields}
    return decode_request(msgspec.json.encode(body), CompletionRequest)


def refused(check: Any) -> ApiError:
    with pytest.raises(ApiError) as caught:
        check()
    assert caught.value.status == 400
    return caught.value


def test_an_embeddings_request_takes_a_string_or_a_list_of_strings() -> None:
    one = validate_embeddings(embedding())
    assert (one.texts, one.base64, one.dimensions) == (("hello",), False, None)
    many = validate_embeddings(embedding(input=["a", "b"], encoding_format="base64", dimensions=32))
    assert (many.texts, many.base64, many.dimensions) == (("a", "b"), True, 32)


@pytest.mark.parametrize(
    ("fields", "param", "words"),
    [
        ({"input": [1, 2, 3]}, "input", "token ids"),
        ({"input": [[1, 2], [3]]}, "input", "token ids"),
        ({"input": []}, "input", "empty list"),
        ({"input": ""}, "input", "must not be empty"),
        ({"input": ["a", ""]}, "input[1]", "must not be empty"),
        ({"input": ["a", {"x": 1}]}, "input[1]", "must be a string"),
        ({"input": ["a"] * (MAX_INPUTS + 1)}, "input", f"the limit is {MAX_INPUTS}"),
        ({"user": "someone"}, "user", "not supported"),
        ({"model": ""}, "model", "must name a model"),
    ],
)
def test_bad_embeddings_requests_are_400_naming_the_field(fields: dict[str, Any], param: str, words: str) -> None:
    error = refused(lambda: validate_embeddings(embedding(**fields)))
    assert error.param == param
    assert words in error.message


def test_the_body_decoder_refuses_what_the_types_forbid() -> None:
    error = refused(lambda: embedding(dimensions=0))
    assert error.param == "dimensions"
    with pytest.raises(ValidationException) as caught:  # the gateway answers it as a 400 naming the key
        embedding(encoding_format="int8")
    assert caught.value.extra == [{"message": "Invalid enum value 'int8'", "key": "encoding_format", "source": "body"}]


def test_base64_is_little_endian_float32_as_openai_sends() -> None:
    vector = [0.5, -0.25, 1.0]
    encoded = encode_vector(vector, as_base64=True)
    assert isinstance(encoded, str)
    assert struct.unpack("<3f", base64.b64decode(encoded)) == (0.5, -0.25, 1.0)
    assert encode_vector(vector, as_base64=False) == vector


def test_a_completion_request_is_one_direct_call_per_prompt_with_its_raw_text() -> None:
    (call,) = validate_completion(
        completion(max_tokens=5, temperature=0.5, top_p=0.9, seed=3, stop=["\n"], stream=True), 100
    )
    assert (call.prompt, call.messages, call.stream, call.session_id) == ("Once", (), True, None)
    assert (call.params.max_tokens, call.params.temperature, call.params.seed, call.params.stop) == (5, 0.5, 3, ("\n",))
    calls = validate_completion(completion(prompt=["a", "b"], echo=False, best_of=1, presence_penalty=0), 100)
    assert [c.prompt for c in calls] == ["a", "b"]


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"echo": True}, "echo"),
        ({"suffix": "end"}, "suffix"),
        ({"best_of": 2}, "best_of"),
        ({"logprobs": 0}, "logprobs"),
        ({"presence_penalty": 0.5}, "presence_penalty"),
        ({"frequency_penalty": -1.0}, "frequency_penalty"),
        ({"logit_bias": {"50256": -100}}, "logit_bias"),
        ({"user": "u1"}, "user"),
        ({"n": 2}, "n"),
        ({"prompt": [1, 2, 3]}, "prompt"),
        ({"prompt": [[1, 2]]}, "prompt"),
        ({"prompt": ["a", "b"], "stream": True}, "prompt"),
        ({"max_tokens": 101}, "max_tokens"),
        ({"stop": ["a", ""]}, "stop"),
    ],
)
def test_bad_completion_requests_are_400_naming_the_field(fields: dict[str, Any], param: str) -> None:
    error = refused(lambda: validate_completion(completion(**fields), 100))
    assert error.param == param
    assert param.split("[")[0] in error.message


MANIFEST = parse_manifest((FIXTURES / "tiny-support.yaml").read_text())


def test_each_kind_of_model_serves_its_endpoints() -> None:
    assert endpoints_of("encoder", entry=False, remote=False) == ["embeddings"]
    assert endpoints_of("encoder", entry=True, remote=False) == ["chat.completions", "messages", "embeddings"]
    assert endpoints_of("causal-lm", entry=False, remote=False) == ["chat.completions", "messages", "completions"]
    assert endpoints_of("causal-lm", entry=False, remote=True) == ["chat.completions", "messages"]
    assert endpoints_of(None, entry=True, remote=False) == ["chat.completions", "messages"]


def test_a_model_asked_for_an_endpoint_it_does_not_serve_is_400_naming_it_and_what_it_serves() -> None:
    error = refused(lambda: require_endpoint(MANIFEST, 1, "router", "completions"))
    assert error.param == "model"
    assert "model 'router' does not serve /v1/completions" in error.message
    assert "/v1/chat.completions" in error.message
    with pytest.raises(ApiError) as caught:
        require_endpoint(MANIFEST, 1, "nope", "embeddings")
    assert (caught.value.status, caught.value.code) == (404, "model_not_found")


def test_a_streamed_completion_ends_with_its_finish_reason_and_usage() -> None:
    t = Transcript(
        request_id="r1", model="billing", routed=False, manifest_version=1, session_id=None, started=0.0, created=7
    )
    usage = Usage(prompt_tokens=3, completion_tokens=2, total_tokens=5, cached_tokens=0)
    t.on_chunk(GenerateChunk(request_id="r1", model_id="billing", worker_id="w", text="ab"), 0.1, 1.0)
    t.on_chunk(
        GenerateChunk(request_id="r1", model_id="billing", worker_id="w", text="", finish_reason="length", usage=usage),
        0.2,
        1.1,
    )
    closing, usage_only = closing_chunks(t, 0.3, include_usage=True)
    body = msgspec.json.decode(sse(closing)[len(b"data: ") :])
    assert body["object"] == "text_completion"
    assert body["id"] == "cmpl-r1"
    assert body["choices"] == [{"text": "", "index": 0, "finish_reason": "length", "logprobs": None}]
    assert usage_only.choices == []
    assert usage_only.usage is not None
    assert usage_only.usage.total_tokens == 5


def test_a_reply_larger_than_a_message_is_split_in_order_with_the_totals_last() -> None:
    vectors = [[float(i)] * 8 for i in range(100)]
    reply = EmbedReply(model_id="m", worker_id="w", vectors=vectors, latency_ms=5.0, prompt_tokens=300)
    assert embed_frames(reply, 1 << 20) == [reply]  # it fits: one frame
    frames = embed_frames(reply, 2048)
    assert len(frames) > 1
    assert all(len(msgspec.json.encode(f)) <= 2048 for f in frames)
    assert [v for f in frames for v in f.vectors] == vectors
    assert [(f.prompt_tokens, f.latency_ms) for f in frames[:-1]] == [(0, 0.0)] * (len(frames) - 1)
    assert (frames[-1].prompt_tokens, frames[-1].latency_ms) == (300, 5.0)
    # worst-case floats still fit
    wide = EmbedReply(model_id="m", worker_id="w", vectors=[[-1.2345678901234567e-05] * 64] * 50, latency_ms=1.0)
    assert all(len(msgspec.json.encode(f)) <= 4096 for f in embed_frames(wide, 4096))


def test_a_model_this_machine_cannot_tell_is_left_to_its_worker() -> None:
    text = (FIXTURES / "tiny-support.yaml").read_text().replace("@TINY_BERT@", "/nonexistent/an-encoder")
    text = text.replace(
        "source: catalogue://tiny-llama\n      tier: standby", "source: /nonexistent/x\n      tier: standby"
    )
    manifest = parse_manifest(text)
    require_endpoint(manifest, 1, "technical", "embeddings")  # no 400 here: the worker knows
    require_endpoint(manifest, 1, "technical", "completions")
    require_endpoint(manifest, 1, "router", "embeddings")
    error = refused(lambda: require_endpoint(manifest, 1, "router", "completions"))  # the entry routes chat
    assert "model 'router' does not serve /v1/completions (the entry model routes chat requests)" in error.message
    error = refused(lambda: require_endpoint(manifest, 1, "billing", "embeddings"))  # the catalogue says it generates
    assert error.param == "model"
