"""``/v1/embeddings`` and ``/v1/completions`` with the official ``openai`` client on the running tiny
stack (real NATS, router_svc, a worker, ONNX Runtime): vectors, base64, batches, usage, raw prompts,
streaming, the 400s naming what a model does not serve, keys and rate limits, the log."""

from __future__ import annotations

import asyncio
import base64
import math
import struct
from collections.abc import AsyncIterator
from pathlib import Path

import openai
import pytest
import pytest_asyncio

from harness import Stack, start_stack
from nrt.adapters.bus.jetstream import EventPublisher
from nrt.core.api_keys import key_id_of, key_sha256
from nrt.core.events import ApiKeyCreated, RequestAdmitted, RequestCompleted
from nrt.core.vocabulary import KeyScope

pytestmark = pytest.mark.asyncio(loop_scope="module")

TEXTS = ["I was charged twice for my order", "the app crashes when I open it", "hello"]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(nats_url: str, module_nrt_home: Path) -> AsyncIterator[Stack]:
    async with start_stack(nats_url, "tiny-endpoints.yaml") as running:
        yield running


def norm(vector: list[float]) -> float:
    return math.sqrt(sum(x * x for x in vector))


async def test_models_say_which_endpoints_each_model_serves(stack: Stack) -> None:
    async with stack.http() as http:
        models = {m["id"]: m["endpoints"] for m in (await http.get("/v1/models")).json()["data"]}
    assert models["embedder"] == ["embeddings"]
    assert models["billing"] == ["chat.completions", "messages", "completions"]
    assert models["router"] == ["chat.completions", "messages", "embeddings"]  # the entry encoder routes chat


async def test_embeddings_of_a_list_are_one_unit_vector_per_input_in_order_with_usage(stack: Stack) -> None:
    client = stack.client()
    batch = await client.embeddings.create(model="embedder", input=TEXTS, encoding_format="float")
    assert [d.index for d in batch.data] == [0, 1, 2]
    dimension = len(batch.data[0].embedding)
    assert dimension > 1
    assert all(len(d.embedding) == dimension for d in batch.data)
    assert all(abs(norm(d.embedding) - 1.0) < 1e-4 for d in batch.data)
    assert batch.model == "embedder"
    assert batch.usage.prompt_tokens == batch.usage.total_tokens >= len(TEXTS)
    # each vector is the one the text gets alone: the batch changes nothing
    alone = await client.embeddings.create(model="embedder", input=TEXTS[1], encoding_format="float")
    assert len(alone.data) == 1
    assert max(abs(a - b) for a, b in zip(alone.data[0].embedding, batch.data[1].embedding, strict=True)) < 1e-5
    assert alone.usage.prompt_tokens < batch.usage.prompt_tokens


async def test_base64_embeddings_decode_to_the_float_ones(stack: Stack) -> None:
    client = stack.client()
    floats = await client.embeddings.create(model="embedder", input=TEXTS, encoding_format="float")
    async with stack.http() as http:
        raw = await http.post("/v1/embeddings", json={"model": "embedder", "input": TEXTS, "encoding_format": "base64"})
    assert raw.status_code == 200, raw.text
    for item, expected in zip(raw.json()["data"], floats.data, strict=True):
        packed = base64.b64decode(item["embedding"])
        decoded = struct.unpack(f"<{len(packed) // 4}f", packed)
        assert max(abs(a - b) for a, b in zip(decoded, expected.embedding, strict=True)) < 1e-6
    # the openai client asks for base64 by default and decodes it itself
    default = await client.embeddings.create(model="embedder", input=TEXTS)
    assert [len(d.embedding) for d in default.data] == [len(d.embedding) for d in floats.data]
    assert abs(default.data[0].embedding[0] - floats.data[0].embedding[0]) < 1e-6


async def test_dimensions_other_than_the_models_own_are_a_400_naming_dimensions(stack: Stack) -> None:
    client = stack.client()
    own = len((await client.embeddings.create(model="embedder", input="x", encoding_format="float")).data[0].embedding)
    same = await client.embeddings.create(model="embedder", input="x", dimensions=own, encoding_format="float")
    assert len(same.data[0].embedding) == own
    with pytest.raises(openai.BadRequestError) as caught:
        await client.embeddings.create(model="embedder", input="x", dimensions=own - 1)
    assert caught.value.param == "dimensions"
    assert "Matryoshka" in caught.value.message


@pytest.mark.parametrize(
    ("model", "call", "words"),
    [
        ("billing", "embeddings", "model 'billing' does not serve /v1/embeddings"),
        ("embedder", "completions", "model 'embedder' does not serve /v1/completions"),
        ("router", "completions", "model 'router' does not serve /v1/completions"),
    ],
)
async def test_a_model_asked_for_what_it_does_not_serve_is_a_400_naming_it(
    stack: Stack, model: str, call: str, words: str
) -> None:
    client = stack.client()
    with pytest.raises(openai.BadRequestError) as caught:
        if call == "embeddings":
            await client.embeddings.create(model=model, input="x")
        else:
            await client.completions.create(model=model, prompt="x", max_tokens=2)
    assert caught.value.param == "model"
    assert words in caught.value.message


async def test_an_encoder_asked_to_chat_directly_is_a_400_naming_what_it_serves(stack: Stack) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        await stack.client().chat.completions.create(
            model="embedder", messages=[{"role": "user", "content": "hi"}], max_tokens=2
        )
    assert "'embedder' is an encoder; it can embed or classify, not generate" in caught.value.message


async def test_token_arrays_are_refused_naming_the_field(stack: Stack) -> None:
    client = stack.client()
    with pytest.raises(openai.BadRequestError) as embed:
        await client.embeddings.create(model="embedder", input=[[1, 2, 3]])
    assert embed.value.param == "input"
    with pytest.raises(openai.BadRequestError) as complete:
        await client.completions.create(model="billing", prompt=[1, 2, 3], max_tokens=2)
    assert complete.value.param == "prompt"
    with pytest.raises(openai.BadRequestError) as echo:
        await client.completions.create(model="billing", prompt="x", max_tokens=2, echo=True)
    assert echo.value.param == "echo"


async def test_a_completion_is_the_raw_prompt_continued_with_usage(stack: Stack) -> None:
    client = stack.client()
    completion = await client.completions.create(model="billing", prompt="Once upon a time", max_tokens=5, seed=7)
    assert completion.object == "text_completion"
    assert completion.model == "billing"
    (choice,) = completion.choices
    assert choice.finish_reason in ("stop", "length")
    assert completion.usage is not None
    assert completion.usage.completion_tokens <= 5
    assert completion.usage.total_tokens == completion.usage.prompt_tokens + completion.usage.completion_tokens
    # no chat template: billing's "Billing desk. Q: ... A:" would add many tokens to a chat request's prompt
    chat = await client.chat.completions.create(
        model="billing", messages=[{"role": "user", "content": "Once upon a time"}], max_tokens=1
    )
    assert completion.usage.prompt_tokens < chat.usage.prompt_tokens  # type: ignore[union-attr]
    # greedy, the same prompt gives the same text, and two prompts are two choices
    both = await client.completions.create(
        model="billing", prompt=["Once upon a time", "Hi"], max_tokens=5, temperature=0
    )
    again = await client.completions.create(model="billing", prompt="Once upon a time", max_tokens=5, temperature=0)
    assert [c.index for c in both.choices] == [0, 1]
    assert both.choices[0].text == again.choices[0].text
    assert both.usage is not None
    assert both.usage.prompt_tokens > again.usage.prompt_tokens  # type: ignore[union-attr]


async def test_a_streamed_completion_is_text_completion_chunks_ending_in_done(stack: Stack) -> None:
    client = stack.client()
    whole = await client.completions.create(model="billing", prompt="Once upon a time", max_tokens=6, temperature=0)
    stream = await client.completions.create(
        model="billing",
        prompt="Once upon a time",
        max_tokens=6,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = [chunk async for chunk in stream]
    assert all(c.object == "text_completion" for c in chunks)
    assert "".join(c.choices[0].text for c in chunks if c.choices) == whole.choices[0].text
    assert chunks[-2].choices[0].finish_reason == whole.choices[0].finish_reason
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens  # type: ignore[union-attr]
    async with stack.http() as http:
        body = {"model": "billing", "prompt": "Hi", "max_tokens": 2, "stream": True}
        raw = await http.post("/v1/completions", json=body)
    assert raw.headers["content-type"].startswith("text/event-stream")
    assert raw.text.endswith("data: [DONE]\n\n")


async def test_both_are_recorded_in_the_log_with_their_key_and_tokens(stack: Stack) -> None:
    client = stack.client()
    key_id = key_id_of(key_sha256("test-api-key"))
    embedded = await client.embeddings.with_raw_response.create(model="embedder", input=TEXTS)
    completed = await client.completions.with_raw_response.create(model="billing", prompt="Hi", max_tokens=3)
    for response, model in ((embedded, "embedder"), (completed, "billing")):
        request_id = response.headers["x-nrt-request-id"]
        events = await stack.events(request_id, until=2)
        assert [type(e) for e in events] == [RequestAdmitted, RequestCompleted]
        admitted, done = events
        assert isinstance(admitted, RequestAdmitted)
        assert isinstance(done, RequestCompleted)
        assert (admitted.model_id, done.model_id, admitted.key_id, done.key_id) == (model, model, key_id, key_id)
        assert done.prompt_tokens > 0
    assert embedded.parse().usage.prompt_tokens == done_tokens(await stack.events(embedded.headers["x-nrt-request-id"]))


def done_tokens(events: list[object]) -> int:
    (done,) = [e for e in events if isinstance(e, RequestCompleted)]
    return done.prompt_tokens


async def add_key(stack: Stack, key: str, rps: float | None = None, tokens_per_min: int | None = None) -> None:
    digest = key_sha256(key)
    await EventPublisher(stack.nc).publish(
        ApiKeyCreated(
            key_id=key_id_of(digest),
            name=key,
            scope=KeyScope.INFER,
            key_sha256=digest,
            rps=rps,
            tokens_per_min=tokens_per_min,
        )
    )
    for _ in range(100):  # the gateway folds it from the stream
        try:
            await stack.client(api_key=key).models.list()
            return
        except openai.AuthenticationError:
            await asyncio.sleep(0.05)
    raise AssertionError(f"the gateway never knew key {key}")


async def test_keys_and_rate_limits_apply_as_for_chat(stack: Stack) -> None:
    with pytest.raises(openai.AuthenticationError):
        await stack.client(api_key="nrt-wrong").embeddings.create(model="embedder", input="x")
    with pytest.raises(openai.AuthenticationError):
        await stack.client(api_key="nrt-wrong").completions.create(model="billing", prompt="x", max_tokens=1)
    await add_key(stack, "nrt-thrifty-key", tokens_per_min=1)
    thrifty = stack.client(api_key="nrt-thrifty-key")
    await thrifty.embeddings.create(model="embedder", input=TEXTS)  # more than 1 token, charged after
    with pytest.raises(openai.RateLimitError) as limited:
        await thrifty.embeddings.create(model="embedder", input="x")
    assert "tokens per minute" in limited.value.message
    with pytest.raises(openai.RateLimitError):
        await thrifty.completions.create(model="billing", prompt="x", max_tokens=1)
    await add_key(stack, "nrt-slow-key", rps=1)  # its one request of this second went on models.list
    slow = stack.client(api_key="nrt-slow-key")
    with pytest.raises(openai.RateLimitError) as slowed:
        await slow.completions.create(model="billing", prompt="x", max_tokens=1)
    assert "requests per second" in slowed.value.message


async def test_a_batch_larger_than_a_nats_message_comes_back_whole_and_in_order(stack: Stack) -> None:
    texts = [f"order number {i} was charged twice" for i in range(2048)]  # ~1.3 MB of vectors as JSON
    batch = await stack.client().embeddings.create(model="embedder", input=texts, encoding_format="float")
    assert [d.index for d in batch.data] == list(range(2048))
    some = await stack.client().embeddings.create(model="embedder", input=texts[2040:], encoding_format="float")
    for got, expected in zip(batch.data[2040:], some.data, strict=True):
        assert max(abs(a - b) for a, b in zip(got.embedding, expected.embedding, strict=True)) < 1e-5
