"""Failures on ``POST /v1/messages`` are Anthropic errors: a model nobody serves (503 before the
answer), a worker that dies mid-stream (an ``error`` event ends the stream). Each test runs its
own stack (real worker, router_svc, gateway, real NATS), as in test_failures."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anthropic
import pytest
from test_failures import LONG, failed_event, quick

from harness import API_KEY, Stack, start_stack


def client(stack: Stack) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=stack.base_url, api_key=API_KEY, max_retries=0)


def user(text: str) -> list[Any]:
    return [{"role": "user", "content": text}]


async def test_a_model_nobody_serves_is_an_overloaded_error_and_a_dying_worker_an_error_event(
    nats_url: str, nrt_home: Path
) -> None:
    loads = {"router": "resident", "billing": "resident", "fallback": "resident"}  # technical is placed nowhere
    async with start_stack(nats_url, "tiny-support.yaml", loads=loads, settings=quick(nats_url)) as stack:
        started = time.monotonic()
        with pytest.raises(anthropic.InternalServerError) as caught:
            await client(stack).messages.create(model="technical", max_tokens=8, messages=user("hi"))
        assert time.monotonic() - started < 1
        assert caught.value.status_code == 503
        assert caught.value.type == "overloaded_error"
        assert caught.value.error_code == "model_unavailable"
        assert caught.value.response.headers["retry-after"]
        failed = await failed_event(stack, caught.value.response.headers["x-nrt-request-id"])
        assert (failed.code, failed.status) == ("model_unavailable", 503)

        async with client(stack).messages.with_streaming_response.create(
            model="billing", max_tokens=LONG, messages=user("hi"), stream=True
        ) as response:
            request_id = response.headers["x-nrt-request-id"]
            events = await response.parse()
            received = 0
            started = time.monotonic()
            with pytest.raises(anthropic.APIStatusError) as mid_stream:
                async for _ in events:
                    received += 1
                    if received == 4:  # message_start, the text block's start, two deltas
                        await stack.worker_nc.close()  # the worker is gone
        assert time.monotonic() - started < 5
        assert mid_stream.value.type == "timeout_error"
        assert mid_stream.value.error_code == "deadline_exceeded"
        assert mid_stream.value.api_message is not None
        assert "no next token from worker w-gateway (nrt.infer.billing) within 1s" in mid_stream.value.api_message
        failed = await failed_event(stack, request_id)
        assert (failed.code, failed.status, failed.model_id) == ("deadline_exceeded", 504, "billing")
