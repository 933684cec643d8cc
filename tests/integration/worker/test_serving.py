"""Serving on real tiny models, without NATS: the typed replies, the cold start and the session events."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import msgspec
import pytest

from nrt.adapters.bus.errors import BadRequest, RemoteError, Unavailable
from nrt.adapters.inference import BatchingGenerator, CausalLM
from nrt.core.events import SessionOpened, SessionTouched, TierChanged
from nrt.core.protocol import (
    ChatMessage,
    ClassifyRequest,
    EmbedRequest,
    GenerateChunk,
    GenerateRequest,
    PromoteModel,
    SamplingParams,
)
from nrt.hosting import classify
from nrt.testing.hf_checkpoints import put_in_cache, save_checkpoint
from shell_fakes import LLAMA, PROMPT, Jobs


def request(model_id: str, prompt: str = PROMPT, session_id: str | None = None, **params: object) -> GenerateRequest:
    stream = bool(params.pop("stream", True))
    return GenerateRequest(
        request_id="r",
        model_id=model_id,
        manifest_version=1,
        prompt=prompt,
        params=SamplingParams(**params),  # type: ignore[arg-type]
        session_id=session_id,
        stream=stream,
    )


async def answer(jobs: Jobs, req: GenerateRequest) -> list[GenerateChunk]:
    return [chunk async for chunk in jobs.serving.generate(req)]


def text(chunks: list[GenerateChunk]) -> str:
    return "".join(c.text for c in chunks)


async def test_a_standby_model_answers_after_a_cold_start_timed_on_the_first_chunk(jobs: Jobs) -> None:
    await jobs.command("load", "m", source=LLAMA, tier="standby")
    chunks = await answer(jobs, request("m", max_tokens=6))
    assert len(chunks) >= 2
    assert chunks[0].cold_start_ms is not None
    assert chunks[0].cold_start_ms > 0
    assert all(c.cold_start_ms is None for c in chunks[1:])
    assert [c.finish_reason is not None for c in chunks] == [False] * (len(chunks) - 1) + [True]
    last = chunks[-1]
    assert last.usage is not None
    assert last.usage.completion_tokens == sum(len(c.token_ids) for c in chunks) <= 6
    assert {(c.request_id, c.model_id, c.worker_id) for c in chunks} == {("r", "m", "w-jobs")}
    cold = jobs.shell.of(TierChanged)[-1]
    assert (cold.from_tier, cold.to_tier, cold.reason, cold.cold_start) == ("standby", "resident", "on_demand", True)
    again = await answer(jobs, request("m", max_tokens=6))
    assert again[0].cold_start_ms is None
    assert text(again) == text(chunks)  # greedy
    whole = await answer(jobs, request("m", max_tokens=6, stream=False))
    assert len(whole) == 1
    assert (whole[0].text, whole[0].finish_reason) == (text(chunks), last.finish_reason)


async def test_a_conversation_is_opened_once_and_touched_every_turn(jobs: Jobs) -> None:
    await jobs.command("load", "m", source=LLAMA, tier="resident")
    turn1 = "User: hello there\nAssistant:"
    first = await answer(jobs, request("m", turn1, session_id="s1", max_tokens=4))
    turn2 = turn1 + text(first) + "\nUser: and then?\nAssistant:"
    await answer(jobs, request("m", turn2, session_id="s1", max_tokens=4))
    await answer(jobs, request("m", turn2, max_tokens=4))  # no session: no session events
    assert [type(e) for e in jobs.shell.calls if isinstance(e, SessionOpened | SessionTouched)] == [
        SessionOpened,
        SessionTouched,
        SessionTouched,
    ]
    opened = jobs.shell.of(SessionOpened)[0]
    assert (opened.session_id, opened.model_id, opened.worker_id) == ("s1", "m", "w-jobs")
    touched = jobs.shell.of(SessionTouched)
    assert touched[0].reused_tokens == 0
    assert touched[1].reused_tokens > 0  # the second turn prefilled only its new tokens
    assert touched[1].cached_tokens > touched[0].cached_tokens
    assert touched[1].kv_bytes > 0
    assert set(jobs.host.get("m").sessions) == {"s1"}


async def test_each_request_is_counted_in_flight_while_it_is_served(jobs: Jobs) -> None:
    await jobs.command("load", "m", source=LLAMA, tier="resident")
    hosted = jobs.host.get("m")
    with jobs.serving.active("m"), jobs.serving.active("m"):
        assert hosted.active_requests == 2
    with pytest.raises(RuntimeError), jobs.serving.active("m"):
        raise RuntimeError("the handler failed")
    assert hosted.active_requests == 0
    with pytest.raises(Unavailable, match="model 'nobody' is not hosted on this worker"), jobs.serving.active("nobody"):
        pass


async def test_requests_a_model_cannot_serve_are_refused_by_name(jobs: Jobs, nrt_home: Path) -> None:
    await jobs.command("load", "m", source=LLAMA, tier="resident")
    await jobs.command("load", "router", source=str(nrt_home / "models" / "tiny-bert"), tier="resident")
    with pytest.raises(BadRequest, match="model 'router' is an encoder; it can embed or classify, not generate"):
        await answer(jobs, request("router"))
    with pytest.raises(BadRequest, match="model 'm' is not an encoder; it cannot embed"):
        await jobs.serving.embed(EmbedRequest(request_id="e", model_id="m", texts=("a",)))
    with pytest.raises(BadRequest, match="classify needs at least one label"):
        await jobs.serving.classify(ClassifyRequest(request_id="c", model_id="router", text="hi", labels=()))
    with pytest.raises(RemoteError) as info:
        await answer(jobs, request("m", "word " * 400, max_tokens=4))
    assert (info.value.code, info.value.status) == ("context_window_exceeded", 400)
    with pytest.raises(Unavailable):
        await answer(jobs, request("nobody"))


async def test_an_encoder_embeds_and_classifies_within_the_given_labels(jobs: Jobs, nrt_home: Path) -> None:
    await jobs.command("load", "router", source=str(nrt_home / "models" / "tiny-bert"), tier="standby")
    embedded = await jobs.serving.embed(EmbedRequest(request_id="e", model_id="router", texts=("a", "b c")))
    assert (embedded.model_id, embedded.worker_id, len(embedded.vectors)) == ("router", "w-jobs", 2)
    assert abs(sum(v * v for v in embedded.vectors[0]) - 1.0) < 1e-4
    examples = {"greet": ("hello there", "hi friend"), "bye": ("goodbye now", "see you later")}
    reply = await jobs.serving.classify(
        ClassifyRequest(
            request_id="c", model_id="router", text="hello there", labels=("greet", "bye"), examples=examples
        )
    )
    assert set(reply.scores) == {"greet", "bye"}
    assert reply.best == "greet"  # the text is one of greet's own examples
    assert 0.0 <= reply.confidence <= 1.0


async def test_a_causal_router_scores_its_options_in_one_batched_run_as_it_would_one_by_one(
    jobs: Jobs, monkeypatch: pytest.MonkeyPatch
) -> None:
    await jobs.command("load", "router", source=LLAMA, tier="resident")
    runtime = jobs.host.runtime("router")
    assert isinstance(runtime, BatchingGenerator)
    model = runtime.model
    assert model.extends_rows_together  # the tiny Llama batches exactly: its options go side by side in one run
    labels = ("billing", "technical")
    texts = ("I was charged twice this month", "hello", "The app crashes when I upload a file")
    batched = [classify.classify_causal(model, labels, text) for text in texts]
    monkeypatch.setattr(CausalLM, "extends_rows_together", property(lambda _: False))
    one_by_one = [classify.classify_causal(model, labels, text) for text in texts]
    for a, b in zip(batched, one_by_one, strict=True):
        assert a.best == b.best
        assert set(a.scores) == set(labels)
        assert all(abs(a.scores[label] - b.scores[label]) < 1e-4 for label in labels)
        assert abs(a.confidence - b.confidence) < 1e-6


class _Delta(msgspec.Struct):
    content: str


class _Choice(msgspec.Struct):
    delta: _Delta
    finish_reason: str | None = None


class _Chunk(msgspec.Struct):
    choices: list[_Choice]


@asynccontextmanager
async def openai_endpoint(pieces: list[tuple[str, str | None]]) -> AsyncIterator[tuple[str, list[bytes]]]:
    """A real HTTP server on a free port that streams ``pieces`` as an OpenAI chat completion:
    its /v1 URL, and the request bodies it receives."""
    bodies: list[bytes] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
        )
        bodies.append(await reader.readexactly(length))
        events = [msgspec.json.encode(_Chunk([_Choice(_Delta(t), f)])) for t, f in pieces]
        stream = b"".join(b"data: " + e + b"\n\n" for e in events) + b"data: [DONE]\n\n"
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: %d\r\n\r\n" % len(stream))
        writer.write(stream)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        yield f"http://127.0.0.1:{port}/v1", bodies


async def test_a_remote_model_streams_the_endpoint_answer_as_chunks(jobs: Jobs) -> None:
    async with openai_endpoint([("Hello", None), (" there", None), ("", "stop")]) as (url, bodies):
        await jobs.command("load", "fallback", source=url, tier="remote")
        assert jobs.host.tier("fallback") == "remote"
        chunks = await answer(jobs, request("fallback", "hi", max_tokens=5))
    assert [(c.text, c.finish_reason) for c in chunks] == [("Hello", None), (" there", None), ("", "stop")]
    assert {(c.model_id, c.worker_id) for c in chunks} == {("fallback", "w-jobs")}
    assert [msgspec.json.decode(body) for body in bodies] == [
        {
            "model": "default",
            "messages": [{"role": "user", "content": "hi"}],
            "stream": True,
            "stream_options": {"include_usage": True},  # the endpoint's usage, on a last chunk
            "max_tokens": 5,
            "temperature": 0.0,  # the manifest's defaults, where the client set none
            "top_p": 1.0,
        }
    ]
    assert jobs.shell.of(PromoteModel) == []  # a remote model is never promoted


async def test_an_operators_model_is_prompted_with_its_own_chat_template(
    jobs: Jobs, tmp_path: Path, hf_cache: Path
) -> None:
    import transformers

    checkpoint = save_checkpoint(tmp_path / "ckpt", "qwen2")
    put_in_cache(hf_cache, "acme/support", checkpoint)
    await jobs.command("load", "support", "placement", source="hf://acme/support", tier="resident")
    conversation = [
        ChatMessage("system", "You help with billing."),
        ChatMessage("user", "I was charged twice."),
        ChatMessage("assistant", "Which order?"),
        ChatMessage("user", "Order 4417."),
    ]
    chat = GenerateRequest(
        request_id="r",
        model_id="support",
        manifest_version=1,
        messages=tuple(conversation),
        params=SamplingParams(max_tokens=3, temperature=0.0),
    )
    chunks = await answer(jobs, chat)
    usage = chunks[-1].usage
    assert usage is not None
    expected = transformers.AutoTokenizer.from_pretrained(str(checkpoint)).apply_chat_template(
        [{"role": m.role, "content": m.content} for m in conversation], tokenize=True, add_generation_prompt=True
    )
    assert usage.prompt_tokens == len(expected)  # the model's template, its special tokens written once
