"""The remote tier's Anthropic Messages client against a real local HTTP server speaking that wire
format (``anthropic_protocol_fixture``: a protocol fixture, not Anthropic and not NRT's /v1/messages).

The model is the spec example's fallback written as ``anthropic://...`` with ``api_key_env`` and a
``base_url`` pointing at the fixture; the worker's jobs run it on a real ModelHost, without NATS.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import pytest

from anthropic_protocol_fixture import ANSWER, CACHE_READ_TOKENS, INPUT_TOKENS, Seen, anthropic_app
from http_servers import hang_up_after_request, serve_app
from nrt.adapters.bus.errors import RemoteError
from nrt.adapters.infra import free_port
from nrt.core.manifest import ModelSpec, parse_manifest
from nrt.core.protocol import ChatMessage, GenerateChunk, GenerateRequest, SamplingParams
from nrt.core.vocabulary import Tier
from nrt.hosting.remote.policy import RemotePolicy
from nrt.hosting.remote.transport import RemoteClient
from paths import FIXTURES
from shell_fakes import Jobs

KEY_ENV = "NRT_TEST_ANTHROPIC_KEY"
KEY = "sk-ant-fixture-key"
SPEC_EXAMPLE = FIXTURES / "spec-customer-support.yaml"
SPEC_FALLBACK = "fallback:\n  source: hf://anthropic/claude-haiku\n  tier: remote\n"
MESSAGES = (ChatMessage("system", "Answer briefly."), ChatMessage("user", "hello"))


def fallback_spec(base_url: str, model: str = "claude-haiku-3") -> ModelSpec:
    """The spec example's fallback, as an Anthropic model at ``base_url`` with its key in $NRT_TEST_ANTHROPIC_KEY."""
    text = SPEC_EXAMPLE.read_text()
    assert SPEC_FALLBACK in text
    fallback = (
        f"fallback:\n  source: anthropic://{model}\n  tier: remote\n  api_key_env: {KEY_ENV}\n  base_url: {base_url}\n"
    )
    spec = parse_manifest(text.replace(SPEC_FALLBACK, fallback)).fallback
    assert spec is not None
    return spec


def request(stream: bool = True, max_tokens: int | None = 5) -> GenerateRequest:
    return GenerateRequest(
        request_id="r",
        model_id="fallback",
        manifest_version=1,
        messages=MESSAGES,
        params=SamplingParams(max_tokens=max_tokens),
        stream=stream,
    )


async def load(jobs: Jobs, base_url: str, model: str = "claude-haiku-3") -> None:
    spec = fallback_spec(base_url, model)
    jobs.shell.specs["fallback"] = spec
    await jobs.command("load", "fallback", source=spec.source, tier="remote")


async def answer(jobs: Jobs, req: GenerateRequest) -> list[GenerateChunk]:
    return [chunk async for chunk in jobs.serving.generate(req)]


async def failure(jobs: Jobs, req: GenerateRequest) -> RemoteError:
    with pytest.raises(RemoteError) as info:
        await answer(jobs, req)
    return info.value


@pytest.fixture
def seen() -> Seen:
    return Seen()


@pytest.fixture
async def fixture_url(seen: Seen, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[str]:
    """The protocol fixture's base URL; the worker has the key it takes."""
    monkeypatch.setenv(KEY_ENV, KEY)
    async with serve_app(anthropic_app(KEY, seen)) as url:
        yield url


async def test_a_streamed_answer_comes_as_chunks_with_the_endpoints_usage_last(
    jobs: Jobs, fixture_url: str, seen: Seen
) -> None:
    await load(jobs, fixture_url)
    assert jobs.host.tier("fallback") == Tier.REMOTE
    chunks = await answer(jobs, request())
    assert [c.text for c in chunks] == [*ANSWER, ""]
    assert [c.finish_reason for c in chunks] == [None] * len(ANSWER) + ["stop"]
    usage = chunks[-1].usage
    assert usage is not None
    assert (usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens) == (
        INPUT_TOKENS + CACHE_READ_TOKENS,
        len(ANSWER),
        CACHE_READ_TOKENS,
    )
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    assert all(c.usage is None for c in chunks[:-1])
    assert (seen.headers[0]["x-api-key"], seen.headers[0]["anthropic-version"]) == (KEY, "2023-06-01")
    assert "authorization" not in seen.headers[0]
    assert seen.bodies == [
        {
            "model": "claude-haiku-3",
            "max_tokens": 5,
            "system": "Answer briefly.",  # the system turn goes in its own field
            "messages": [{"role": "user", "content": "hello"}],
            "temperature": 0.0,
            "stream": True,
        }
    ]


async def test_a_whole_answer_is_one_chunk(jobs: Jobs, fixture_url: str, seen: Seen) -> None:
    await load(jobs, fixture_url)
    chunks = await answer(jobs, request(stream=False, max_tokens=None))
    assert len(chunks) == 1
    assert (chunks[0].text, chunks[0].finish_reason) == ("".join(ANSWER), "stop")
    assert chunks[0].usage is not None
    assert chunks[0].usage.completion_tokens == len(ANSWER)
    assert seen.bodies[0]["stream"] is False
    assert seen.bodies[0]["max_tokens"] == 256  # the manifest's default: Anthropic requires one


@pytest.mark.parametrize("stream", [True, False])
async def test_the_token_limit_is_finish_reason_length(jobs: Jobs, fixture_url: str, stream: bool) -> None:
    await load(jobs, fixture_url, "claude-short")
    chunks = await answer(jobs, request(stream=stream))
    assert chunks[-1].finish_reason == "length"
    assert "".join(c.text for c in chunks) == "".join(ANSWER[:2])


async def test_a_refused_key_is_a_502_naming_the_endpoint_and_the_variable(
    jobs: Jobs, fixture_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    await load(jobs, fixture_url)
    monkeypatch.setenv(KEY_ENV, "sk-ant-wrong")  # read at each request: a rotated key is used at once
    error = await failure(jobs, request())
    assert (error.code, error.status) == ("remote_key_refused", 502)
    assert fixture_url in error.message
    assert f"${KEY_ENV}" in error.message
    assert "invalid x-api-key" in error.message


async def test_a_missing_key_fails_the_load_naming_the_variable(
    jobs: Jobs, fixture_url: str, seen: Seen, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(KEY_ENV)
    with pytest.raises(RemoteError) as info:
        await load(jobs, fixture_url)
    assert (info.value.code, info.value.status) == ("remote_key_missing", 503)
    assert f"${KEY_ENV}" in info.value.message
    assert "fallback" not in jobs.host.hosted
    monkeypatch.setenv(KEY_ENV, KEY)
    await load(jobs, fixture_url)
    monkeypatch.delenv(KEY_ENV)  # gone after the load: the request is refused, nothing is sent
    error = await failure(jobs, request())
    assert (error.code, error.status) == ("remote_key_missing", 503)
    assert seen.bodies == []


async def test_rate_limiting_passes_on_429_and_retry_after(jobs: Jobs, fixture_url: str) -> None:
    await load(jobs, fixture_url, "rate-limited")
    error = await failure(jobs, request())
    assert (error.code, error.status, error.retry_after) == ("remote_rate_limited", 429, 7.0)


async def test_an_overloaded_endpoint_is_a_502(jobs: Jobs, fixture_url: str) -> None:
    await load(jobs, fixture_url, "overloaded")
    error = await failure(jobs, request())
    assert (error.code, error.status) == ("remote_failed", 502)
    assert "HTTP 529" in error.message


async def test_an_error_event_mid_stream_ends_the_answer_with_a_502(jobs: Jobs, fixture_url: str) -> None:
    await load(jobs, fixture_url, "broken-mid-answer")
    chunks: list[GenerateChunk] = []
    with pytest.raises(RemoteError) as info:
        async for chunk in jobs.serving.generate(request()):
            chunks.append(chunk)
    assert [c.text for c in chunks] == list(ANSWER)  # what came before the error was passed on
    assert (info.value.code, info.value.status) == ("remote_failed", 502)
    assert "overloaded_error" in info.value.message


async def test_an_endpoint_that_sends_nothing_in_time_is_a_504(jobs: Jobs, fixture_url: str) -> None:
    jobs.serving.remote = RemoteClient(RemotePolicy(read_timeout_s=0.3))
    await load(jobs, fixture_url, "slow")
    error = await failure(jobs, request())
    assert (error.code, error.status) == ("remote_timeout", 504)
    assert "sent nothing for 0.3 s" in error.message
    await jobs.serving.remote.aclose()


async def test_a_failed_connect_is_retried_and_the_request_sent_once(
    jobs: Jobs, seen: Seen, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    jobs.serving.remote = RemoteClient(RemotePolicy(connect_attempts=3, retry_backoff_s=0.5))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    await load(jobs, url)
    with caplog.at_level(logging.WARNING, logger="nrt.worker.remote"):
        answering = asyncio.create_task(answer(jobs, request()))
        while not any("attempt 1 of 3" in r.getMessage() for r in caplog.records):  # nothing listens yet
            assert not answering.done(), answering
            await asyncio.sleep(0.01)
        async with serve_app(anthropic_app(KEY, seen), port=port):  # up before the retry, 0.5 s later
            chunks = await answering
    assert "".join(c.text for c in chunks) == "".join(ANSWER)
    assert len(seen.bodies) == 1
    await jobs.serving.remote.aclose()


async def test_an_endpoint_that_never_answers_the_connect_is_a_502_after_the_attempts(
    jobs: Jobs, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    jobs.serving.remote = RemoteClient(RemotePolicy(connect_attempts=2, retry_backoff_s=0.05))
    url = f"http://127.0.0.1:{free_port()}"
    await load(jobs, url)
    error = await failure(jobs, request())
    assert (error.code, error.status) == ("remote_unreachable", 502)
    assert f"could not connect to the remote endpoint {url}" in error.message
    assert "after 2 attempts" in error.message


async def test_a_request_that_reached_the_endpoint_is_never_sent_again(
    jobs: Jobs, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    async with hang_up_after_request() as (url, received):
        await load(jobs, url)
        error = await failure(jobs, request())
    assert (error.code, error.status) == ("remote_failed", 502)
    assert "after the request was sent" in error.message
    assert len(received) == 1  # no duplicate generation
