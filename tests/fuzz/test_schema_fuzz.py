"""schemathesis over the gateway's own OpenAPI schema, against the real stack (real NATS,
router_svc, worker, tiny ONNX models): its examples, boundary-value coverage and fuzzing
phases, valid and invalid inputs, every check. No server error, no response that breaks the
schema (status, content type, headers, body), no invalid input accepted.

The run is bounded (``MAX_EXAMPLES`` a phase and operation) and reproducible (a fixed seed,
deterministic generation); the schemathesis command line runs it, as one would by hand:
``schemathesis run <gateway>/schema/openapi.json``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from api_gateway.settings import GatewaySettings
from harness import API_KEY, Stack, start_stack

pytestmark = pytest.mark.asyncio(loop_scope="module")  # the stack's loop

MAX_EXAMPLES = 300
SEED = 20260101
WITHIN = 540.0  # seconds: the whole run, on a loaded machine (under the 600 s test timeout; ~250 s here)
HOOKS = Path(__file__).parent / "fuzz_hooks.py"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def fuzzed(nats_url: str, module_nrt_home: Path) -> AsyncIterator[Stack]:
    """The tiny cluster, with limits that keep every request the schema allows within tiny-llama's
    512-token window: at most 8 messages and 32 new tokens (the schema states both)."""
    settings = GatewaySettings(
        nats_url=nats_url,
        route_timeout=10,
        idle_timeout=10,
        request_timeout=30,
        max_tokens_limit=32,
        max_messages=8,
    )
    async with start_stack(nats_url, "tiny-support.yaml", settings=settings) as running:
        yield running


def fuzz_headers(stack: Stack) -> dict[str, str]:
    """The headers every fuzzed request carries: the infer key. The admin key is not one of them: the
    admin operations (``PUT /v1/manifest``, the keys) answer 403, which their schema documents."""
    del stack
    return {"Authorization": f"Bearer {API_KEY}"}


async def schemathesis(stack: Stack, report: Path) -> tuple[int, str]:
    headers = [arg for name, value in fuzz_headers(stack).items() for arg in ("-H", f"{name}: {value}")]
    command = [
        sys.executable,
        "-m",
        "schemathesis.cli",
        "run",
        f"{stack.base_url}/schema/openapi.json",
        "--checks",
        "all",
        "--mode",
        "all",
        "--phases",
        "examples,coverage,fuzzing",
        "--max-examples",
        str(MAX_EXAMPLES),
        "--seed",
        str(SEED),
        "--generation-deterministic",
        "--workers",
        "1",
        "--request-timeout",
        "30",
        "--continue-on-failure",
        "--suppress-health-check",
        "all",
        "--no-color",
        "--exclude-path",  # an open-ended SSE stream: a valid request never ends (test_events_feed covers it)
        "/v1/events/stream",
        "--report",
        "ndjson",
        "--report-ndjson-path",
        str(report),
        *headers,
    ]
    env = {**os.environ, "SCHEMATHESIS_HOOKS": str(HOOKS)}  # bodies that fit tiny-llama's window
    process = await asyncio.create_subprocess_exec(  # in the report's folder: its caches stay out of the repo
        *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, cwd=report.parent, env=env
    )
    output, _ = await asyncio.wait_for(process.communicate(), WITHIN)
    assert process.returncode is not None
    return process.returncode, output.decode(errors="replace")


@pytest.mark.filterwarnings("error::RuntimeWarning")  # numpy overflow in the sampler is a failure too
async def test_schemathesis_finds_no_server_error_and_no_schema_mismatch(fuzzed: Stack, tmp_path: Path) -> None:
    report = tmp_path / "schemathesis.ndjson"
    code, output = await schemathesis(fuzzed, report)
    print(output)  # shown when the test fails: every failure, with a curl line to replay it
    events = [json.loads(line) for line in report.read_text().splitlines() if line.strip()]
    assert events, "schemathesis reported nothing"
    assert code == 0, output
    assert any(event.get("ScenarioFinished") for event in events) or "passed" in output, output
