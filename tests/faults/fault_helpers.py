"""What the fault tests share: streaming a request on its own thread, the event log through the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
from stack_processes import STACK_ENV, Stack


@dataclass
class Streamed:
    """One streamed chat request, read on its own thread: what came, how it ended, and when."""

    chunks: int = 0
    request_id: str = ""
    finish: str | None = None
    error: dict[str, Any] | None = None
    ended_at: float | None = None
    started: threading.Event = field(default_factory=threading.Event)


def stream(url: str, model: str, max_tokens: int, out: Streamed, stop_after: int | None = None) -> None:
    """Stream a chat completion into ``out``; close the connection after ``stop_after`` chunks."""
    body = {"model": model, "messages": [{"role": "user", "content": "tell me a long story"}], "stream": True}
    body["max_tokens"] = max_tokens
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=120) as response:
        out.request_id = response.headers.get("x-nrt-request-id", "")
        if response.status_code != 200:
            response.read()
            out.error = response.json()["error"]
            out.ended_at = time.monotonic()
            out.started.set()
            return
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            data = json.loads(line.removeprefix("data: "))
            if "error" in data:
                out.error = data["error"]
                continue
            for choice in data.get("choices", []):
                if choice.get("delta", {}).get("content"):
                    out.chunks += 1
                out.finish = choice.get("finish_reason") or out.finish
            if out.chunks >= 3:
                out.started.set()
            if stop_after is not None and out.chunks >= stop_after:
                break  # the client goes away mid-stream
    out.ended_at = time.monotonic()
    out.started.set()


def nrt(stack: Stack, *args: str) -> str:
    """``nrt ARGS`` against ``stack`` (its URLs in the environment); its stdout."""
    env = {k: v for k, v in os.environ.items() if k not in STACK_ENV}
    env |= {
        "NRT_NATS_URL": stack.endpoints.nats_url,
        "NRT_DATABASE_URL": stack.endpoints.database_url,
        "NRT_GATEWAY_URL": stack.endpoints.gateway_url,
    }
    done = subprocess.run(
        [sys.executable, "-m", "nrt.cli.main", *args], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, f"nrt {' '.join(args)} exited with {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def events_of(stack: Stack, type_name: str) -> list[str]:
    """The request ids of every recorded event of ``type_name`` (one entry per event)."""
    lines = nrt(stack, "events", "query", "--type", type_name, "--json").splitlines()
    return [json.loads(line)["stream_id"].removeprefix("request:") for line in lines]


def live_state(stack: Stack) -> dict[str, Any]:
    response = httpx.get(f"{stack.url}/v1/cluster", timeout=10)
    assert response.headers["x-nrt-state-source"] == "cluster_state"
    state: dict[str, Any] = response.json()
    return state


def replay_equals_live(stack: Stack) -> bool:
    """The replayed log equals the live state, read in a quiet moment (else False: try again)."""
    before = live_state(stack)
    if before["in_flight"]:
        return False
    replayed = json.loads(nrt(stack, "replay", "--json"))
    after = live_state(stack)
    if before != after:
        return False
    assert replayed["state"] == after
    return True
