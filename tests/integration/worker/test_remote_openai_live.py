"""The remote tier against live servers: a second NRT stack's gateway, as an OpenAI-compatible endpoint
and (its ``/v1/messages``) as an Anthropic one.

Two whole stacks run in this process, each on its own NATS server (worker, router_svc and
gateway, as in tests/support/harness.py). The *remote* stack serves the tiny customer-support
cluster; the *local* stack's models ``billing`` and ``fallback`` are ``tier: remote`` at the remote
stack's ``/v1`` (its ``billing`` model), with the remote's API key in the variable ``api_key_env``
names, and ``technical`` is ``tier: remote`` at a port nothing listens on. A client talks to the
local gateway only.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
import pytest_asyncio
from openai.types.chat import ChatCompletionUserMessageParam

from harness import API_KEY, Stack, record_keys, start_stack
from nrt.adapters.bus.errors import RemoteError
from nrt.adapters.bus.jetstream import EventPublisher
from nrt.adapters.infra import free_port
from nrt.adapters.infra.embedded_nats import EmbeddedNats
from nrt.core.api_keys import bootstrap_event, key_id_of, key_sha256
from nrt.core.events import RequestCompleted
from nrt.core.vocabulary import KeyScope
from nrt.testing.stacks import link_tiny_models
from worker_calls import control

pytestmark = pytest.mark.asyncio(loop_scope="module")

KEY_ENV = "NRT_TEST_REMOTE_KEY"  # the remote stack's key, on the local stack's worker
UNSET_KEY_ENV = "NRT_TEST_REMOTE_KEY_UNSET"  # named by the local 'fallback', never set
REMOTE_KEY = "remote-stack-infer-key"  # an infer key only the remote stack knows
LIMITED_KEY = "remote-stack-limited-key"  # one request per 5 s on the remote stack
MESSAGES: list[ChatCompletionUserMessageParam] = [{"role": "user", "content": "what is on my invoice?"}]
MAX_TOKENS = 6

LOCAL_MANIFEST = """\
# The local stack: billing and fallback are the remote stack's billing model; technical's endpoint is down.
cluster: tiny-remote-client

models:
  router:
    source: "@TINY_BERT@"
    tier: resident
    confidence_threshold: 0.999
    intents:
      billing: ["I was charged twice for my order"]
      technical: ["the app crashes when I open it"]

  specialists:
    - id: billing
      source: {remote}/v1
      tier: remote
      remote_model: billing
      api_key_env: {key_env}
    - id: technical
      source: {down}/v1
      tier: remote
      remote_model: billing
      api_key_env: {key_env}

fallback:
  source: {remote}/v1
  tier: remote
  remote_model: billing
  api_key_env: {unset_env}

routing:
  entry: router
  dispatch_rule: router.output.intent -> specialists.{{intent}}
"""


@pytest.fixture(scope="module")
def module_home(tiny_artifacts: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """NRT_HOME for both stacks, the tiny models in its models/; the remote's key in $NRT_TEST_REMOTE_KEY."""
    home = link_tiny_models(tmp_path_factory.mktemp("nrt-home"), tiny_artifacts)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("NRT_HOME", str(home))
        patch.setenv(KEY_ENV, REMOTE_KEY)
        patch.delenv(UNSET_KEY_ENV, raising=False)
        yield home


@pytest.fixture(scope="module")
def remote_nats_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The remote stack's own NATS server: the two stacks share nothing but HTTP."""
    with EmbeddedNats(tmp_path_factory.mktemp("remote-nats")) as server:
        yield server.url


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def remote(remote_nats_url: str, module_home: Path) -> AsyncIterator[Stack]:
    """The remote stack, with two more infer keys: REMOTE_KEY, and LIMITED_KEY (at most one request per 5 s)."""
    async with start_stack(remote_nats_url, "tiny-support.yaml") as stack:
        await record_keys(stack.nc, {KeyScope.INFER: REMOTE_KEY})
        limited = msgspec.structs.replace(bootstrap_event(LIMITED_KEY, KeyScope.INFER, "limited"), rps=0.2)
        await EventPublisher(stack.nc).publish(limited)
        for key in (REMOTE_KEY, LIMITED_KEY):
            await key_works(stack, key)
        yield stack


@pytest.fixture(scope="module")
def down_url() -> str:
    """An endpoint nobody listens on."""
    return f"http://127.0.0.1:{free_port()}"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def local(
    nats_url: str, remote: Stack, down_url: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Stack]:
    """The local stack; its fallback is not loaded (its key's variable is unset: see the test)."""
    manifest = tmp_path_factory.mktemp("local") / "tiny-remote-client.yaml"
    manifest.write_text(
        LOCAL_MANIFEST.format(remote=remote.base_url, down=down_url, key_env=KEY_ENV, unset_env=UNSET_KEY_ENV)
    )
    loads = {"router": "resident", "billing": "remote", "technical": "remote"}
    async with start_stack(nats_url, str(manifest), loads=loads) as stack:  # an absolute path: read as is
        yield stack


async def key_works(stack: Stack, key: str, within: float = 10.0) -> None:
    """Until ``stack``'s gateway has folded ``key`` (its ``ApiKeyCreated``) and takes it."""
    deadline = time.monotonic() + within
    async with stack.http(key) as http:
        while (await http.get("/v1/models")).status_code != 200:
            assert time.monotonic() < deadline, f"the gateway does not take {key}"
            await asyncio.sleep(0.05)


async def completed(stack: Stack, request_id: str) -> RequestCompleted:
    [event] = [e for e in await stack.events(request_id, until=2) if isinstance(e, RequestCompleted)]
    return event


async def remote_completions(remote: Stack, at_least: int = 0) -> list[RequestCompleted]:
    """The remote stack's completions of requests made with the key it gave this stack (not those of
    ``direct_answer``'s key), once ``at_least`` of them are in its stream (events arrive after the answer)."""
    ours = key_id_of(key_sha256(REMOTE_KEY))
    deadline = time.monotonic() + 5
    while True:
        found = [e for e in await remote.events() if isinstance(e, RequestCompleted) and e.key_id == ours]
        if len(found) >= at_least or time.monotonic() > deadline:
            return found
        await asyncio.sleep(0.05)


async def direct_answer(remote: Stack) -> tuple[str, dict[str, int]]:
    """The remote stack's own answer to the same request: its text and usage."""
    async with remote.http(API_KEY) as http:
        reply = await http.post(
            "/v1/chat/completions", json={"model": "billing", "messages": MESSAGES, "max_tokens": MAX_TOKENS}
        )
    assert reply.status_code == 200, reply.text
    body = reply.json()
    return body["choices"][0]["message"]["content"], body["usage"]


async def test_a_whole_answer_is_the_remote_stacks_with_its_usage_recorded_here(local: Stack, remote: Stack) -> None:
    expected_text, expected_usage = await direct_answer(remote)
    before = len(await remote_completions(remote))
    async with local.http() as http:
        reply = await http.post(
            "/v1/chat/completions", json={"model": "billing", "messages": MESSAGES, "max_tokens": MAX_TOKENS}
        )
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["choices"][0]["message"]["content"] == expected_text
    usage = body["usage"]
    assert (usage["prompt_tokens"], usage["completion_tokens"]) == (
        expected_usage["prompt_tokens"],
        expected_usage["completion_tokens"],
    )
    assert usage["completion_tokens"] > 0
    event = await completed(local, reply.headers["x-nrt-request-id"])  # the remote's usage, recorded like a local one
    assert (event.model_id, event.prompt_tokens, event.completion_tokens) == (
        "billing",
        usage["prompt_tokens"],
        usage["completion_tokens"],
    )
    served = (await remote_completions(remote, at_least=before + 1))[before:]
    assert [(e.model_id, e.key_id) for e in served] == [("billing", key_id_of(key_sha256(REMOTE_KEY)))]
    assert served[0].completion_tokens == usage["completion_tokens"]


async def test_a_streamed_answer_is_the_remote_stacks_token_by_token(local: Stack, remote: Stack) -> None:
    expected_text, expected_usage = await direct_answer(remote)
    stream = await local.client().chat.completions.create(
        model="billing",
        messages=MESSAGES,
        max_tokens=MAX_TOKENS,
        stream=True,
        stream_options={"include_usage": True},
    )
    pieces: list[str] = []
    usage = None
    async for chunk in stream:
        pieces.extend(c.delta.content for c in chunk.choices if c.delta.content)
        usage = chunk.usage or usage
    assert "".join(pieces) == expected_text
    assert len(pieces) > 1  # streamed, not one piece
    assert usage is not None
    assert (usage.prompt_tokens, usage.completion_tokens) == (
        expected_usage["prompt_tokens"],
        expected_usage["completion_tokens"],
    )


@pytest.mark.parametrize("stream", [False, True])
async def test_a_key_the_remote_refuses_is_a_502_naming_the_remote_and_the_variable(
    local: Stack, remote: Stack, monkeypatch: pytest.MonkeyPatch, stream: bool
) -> None:
    monkeypatch.setenv(KEY_ENV, "not-a-key-of-the-remote")  # read at each request
    async with local.http() as http:
        reply = await http.post(
            "/v1/chat/completions", json={"model": "billing", "messages": MESSAGES, "stream": stream}
        )
    assert reply.status_code == 502, reply.text  # before the first token: a status, even for a stream
    error = reply.json()["error"]
    assert error["code"] == "remote_key_refused"
    assert f"the remote endpoint {remote.base_url}/v1 (model 'billing') refused" in error["message"]
    assert f"${KEY_ENV}" in error["message"]


async def test_the_remotes_rate_limit_passes_on_as_429_with_retry_after(
    local: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, LIMITED_KEY)
    body = {"model": "billing", "messages": MESSAGES, "max_tokens": 2}
    async with local.http() as http:
        reply = await http.post("/v1/chat/completions", json=body)
        if reply.status_code == 200:  # the key's one request in 5 s was still free: the next one is not
            reply = await http.post("/v1/chat/completions", json=body)
    assert reply.status_code == 429, reply.text
    error = reply.json()["error"]
    assert error["code"] == "remote_rate_limited"
    assert "is over its limit of 0.2 requests per second" in error["message"]  # the remote's own reason
    assert 1 <= int(reply.headers["retry-after"]) <= 5  # and its own Retry-After


async def test_a_remote_that_is_down_is_retried_then_a_clear_502(
    local: Stack, down_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="nrt.worker.remote"):
        async with local.http() as http:
            reply = await http.post("/v1/chat/completions", json={"model": "technical", "messages": MESSAGES})
    assert reply.status_code == 502, reply.text
    error = reply.json()["error"]
    assert error["code"] == "remote_unreachable"
    assert f"could not connect to the remote endpoint {down_url}/v1" in error["message"]
    assert "after 3 attempts" in error["message"]
    retries = [r.getMessage() for r in caplog.records if r.name == "nrt.worker.remote"]
    assert [("attempt 1 of 3" in m, "attempt 2 of 3" in m) for m in retries] == [(True, False), (False, True)]
    assert time.monotonic() - started < 5.0  # no hang: 0.25 s + 0.5 s of backoff


async def test_without_the_remotes_key_the_load_fails_naming_the_variable_and_requests_get_503(
    local: Stack,
) -> None:
    with pytest.raises(RemoteError) as info:
        await control(
            local.nc,
            local.worker,
            action="load",
            model_id="fallback",
            source=local.manifest.model("fallback").source,
            tier="remote",
        )
    assert info.value.code == "remote_key_missing"
    assert f"${UNSET_KEY_ENV}, which is not set" in info.value.message
    started = time.monotonic()
    async with local.http() as http:
        reply = await http.post("/v1/chat/completions", json={"model": "fallback", "messages": MESSAGES})
    assert reply.status_code == 503, reply.text
    assert reply.json()["error"]["code"] == "model_unavailable"
    assert time.monotonic() - started < 2.0  # at once, not after a timeout


# -- the Anthropic Messages API: the remote stack's own /v1/messages as the endpoint -----------------------

WRONG_KEY_ENV = "NRT_TEST_REMOTE_WRONG_KEY"  # holds a key the remote stack does not know
GREEDY = {"temperature": 0.0}  # the same answer by either API: no sampling

ANTHROPIC_MANIFEST = """\
# The local stack: billing is the remote stack's billing model, asked through its Anthropic Messages API.
cluster: tiny-anthropic-client

models:
  router:
    source: "@TINY_BERT@"
    tier: resident
    confidence_threshold: 0.999
    intents:
      billing: ["I was charged twice for my order"]
      technical: ["the app crashes when I open it"]

  specialists:
    - id: billing
      source: anthropic://billing
      base_url: {remote}
      tier: remote
      api_key_env: {key_env}
    - id: technical
      source: anthropic://billing
      base_url: {remote}
      tier: remote
      api_key_env: {wrong_env}

routing:
  entry: router
  dispatch_rule: router.output.intent -> specialists.{{intent}}
"""


@pytest.fixture(scope="module")
def anthropic_nats_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with EmbeddedNats(tmp_path_factory.mktemp("anthropic-nats")) as server:
        yield server.url


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def anthropic_local(
    anthropic_nats_url: str, remote: Stack, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Stack]:
    """A local stack whose specialists are anthropic:// models at the remote stack's gateway."""
    manifest = tmp_path_factory.mktemp("anthropic-local") / "tiny-anthropic-client.yaml"
    manifest.write_text(ANTHROPIC_MANIFEST.format(remote=remote.base_url, key_env=KEY_ENV, wrong_env=WRONG_KEY_ENV))
    loads = {"router": "resident", "billing": "remote", "technical": "remote"}
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(WRONG_KEY_ENV, "not-a-key-of-the-remote")
        async with start_stack(anthropic_nats_url, str(manifest), loads=loads) as stack:
            yield stack


async def messages_answer(remote: Stack) -> tuple[str, dict[str, int]]:
    """The remote stack's own answer by its /v1/messages: its text and usage."""
    async with remote.http(API_KEY) as http:
        reply = await http.post(
            "/v1/messages",
            json={"model": "billing", "messages": MESSAGES, "max_tokens": MAX_TOKENS, **GREEDY},
        )
    assert reply.status_code == 200, reply.text
    body = reply.json()
    return "".join(block["text"] for block in body["content"] if block["type"] == "text"), body["usage"]


@pytest.mark.parametrize("stream", [False, True])
async def test_an_anthropic_remote_answers_through_the_remote_stacks_messages_api(
    anthropic_local: Stack, remote: Stack, stream: bool
) -> None:
    expected_text, expected_usage = await messages_answer(remote)
    before = len(await remote_completions(remote))
    body = {"model": "billing", "messages": MESSAGES, "max_tokens": MAX_TOKENS, "stream": stream, **GREEDY}
    if stream:
        body["stream_options"] = {"include_usage": True}
    pieces: list[str] = []
    usage: dict[str, int] | None = None
    async with anthropic_local.http() as http:
        if stream:
            async with http.stream("POST", "/v1/chat/completions", json=body) as reply:
                assert reply.status_code == 200
                async for line in reply.aiter_lines():
                    if not line.startswith("data: {"):
                        continue
                    chunk = msgspec.json.decode(line.removeprefix("data: "))
                    pieces.extend(c["delta"]["content"] for c in chunk["choices"] if c["delta"].get("content"))
                    usage = chunk.get("usage") or usage
            assert len(pieces) > 1  # streamed from the remote, not one piece
        else:
            reply = await http.post("/v1/chat/completions", json=body)
            assert reply.status_code == 200, reply.text
            pieces.append(reply.json()["choices"][0]["message"]["content"])
            usage = reply.json()["usage"]
    assert "".join(pieces) == expected_text
    assert usage is not None
    # Anthropic's input_tokens are the prompt tokens prefilled; the prompt is those and the ones read from a cache
    prompt = expected_usage["input_tokens"] + (expected_usage.get("cache_read_input_tokens") or 0)
    assert (usage["prompt_tokens"], usage["completion_tokens"]) == (prompt, expected_usage["output_tokens"])
    served = (await remote_completions(remote, at_least=before + 1))[before:]
    assert [(e.model_id, e.key_id) for e in served] == [("billing", key_id_of(key_sha256(REMOTE_KEY)))]


async def test_an_anthropic_remote_that_refuses_the_key_is_a_502_naming_the_variable(anthropic_local: Stack) -> None:
    async with anthropic_local.http() as http:
        reply = await http.post(
            "/v1/chat/completions", json={"model": "technical", "messages": MESSAGES, "max_tokens": MAX_TOKENS}
        )
    assert reply.status_code == 502, reply.text
    error = reply.json()["error"]
    assert error["code"] == "remote_key_refused"
    assert f"${WRONG_KEY_ENV}" in error["message"]


TOOLS: Any = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 9}},
                "required": ["a"],
                "additionalProperties": False,
            },
        },
    }
]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("wire", ["openai", "anthropic"])
async def test_client_tools_go_to_a_remote_in_its_shape_and_its_calls_come_back(
    local: Stack, anthropic_local: Stack, wire: str, stream: bool
) -> None:
    """The remote stack takes the tools in its API's shape (OpenAI's, or Anthropic's on its /v1/messages);
    its calls come back to the client as this gateway's tool calls, and a tool's result continues the
    conversation there."""
    client = (local if wire == "openai" else anthropic_local).client()
    asked: Any = dict(
        model="billing",
        messages=MESSAGES,
        tools=TOOLS,
        tool_choice="required",
        parallel_tool_calls=False,
        max_tokens=80,
    )
    if stream:
        arguments, finish = "", None
        async for chunk in await client.chat.completions.create(**asked, stream=True):
            for choice in chunk.choices:
                for call in choice.delta.tool_calls or ():
                    arguments += (call.function.arguments if call.function else "") or ""
                finish = choice.finish_reason or finish
        assert finish == "tool_calls"
        assert json.loads(arguments)["a"] in range(10)
        return
    first = (await client.chat.completions.create(**asked)).choices[0]
    assert first.finish_reason == "tool_calls"
    assert first.message.tool_calls is not None
    (call,) = first.message.tool_calls
    assert call.function.name == "add"  # type: ignore[union-attr]
    assert json.loads(call.function.arguments)["a"] in range(10)  # type: ignore[union-attr]
    history: Any = [*MESSAGES, first.message.model_dump(exclude_none=True)]
    history.append({"role": "tool", "tool_call_id": call.id, "content": "5"})
    second = await client.chat.completions.create(
        model="billing", messages=history, tools=TOOLS, tool_choice="none", max_tokens=MAX_TOKENS
    )
    assert second.choices[0].message.content
    assert second.choices[0].message.tool_calls is None
