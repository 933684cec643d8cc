"""Structured outputs benchmark: what a JSON-schema constraint costs the engine, in one run.

The batching engine (``BatchingGenerator``, in process: the constraint lives in its sampling loop,
so NATS would only add noise) serves the same prompts free and constrained, in alternating rounds,
best of each:

1. Decode throughput at batch 1 and 8: aggregate tokens/s of ``n`` concurrent requests, each
   decoding exactly ``--tokens`` tokens. The constrained ones follow a schema whose answer cannot
   end within that many tokens (an array of at least 10,000 records with strings, numbers, enums
   and booleans), so both sides decode the same number of tokens. Target: the constraint costs at
   most 10% (ratio >= 0.9).
2. Time to first token with a large schema (80 properties, nested): the first request with it
   compiles it; the next one finds it in the model's cache. Both against a free request's.
   (llguidance's view of the tokenizer is built once per model, before: its time is printed too.)

    python -m bench.structured [--model tiny-llama|gemma3-270m] [--tokens 64]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import report
from nrt.adapters.catalogue import ROOT_PROVIDER, find_serving, host_provider, prepare
from nrt.adapters.inference import BatchingGenerator, CausalLM, GenerationRequest, build_session, load_weights
from nrt.core.protocol import ResponseFormat

ROUNDS = 5
BATCHES = (1, 8)
PROMPT = "Write the customer records as JSON."

RECORD = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 16},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "plan": {"enum": ["free", "pro", "team"]},
        "balance": {"type": "number"},
        "active": {"type": "boolean"},
    },
    "required": ["name", "age", "plan", "balance", "active"],
    "additionalProperties": False,
}
ENDLESS = {"type": "array", "items": RECORD, "minItems": 10_000}  # no answer ends within --tokens


def large_schema(properties: int = 80) -> dict[str, Any]:
    """A wide, nested object: every JSON Schema type the engine constrains, some enums and patterns."""
    kinds: list[Callable[[int], dict[str, Any]]] = [
        lambda i: {"type": "string", "maxLength": 8 + i % 5},
        lambda i: {"type": "integer", "minimum": -i, "maximum": 1000 + i},
        lambda i: {"enum": [f"v{i}_{j}" for j in range(4)]},
        lambda i: {"type": "array", "items": {"type": "boolean"}, "maxItems": 3},
        lambda i: {"type": "string", "pattern": f"^[a-f0-9]{{{4 + i % 4}}}$"},
        lambda i: {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "null"}}, "required": ["x"]},
    ]
    props = {f"field_{i}": kinds[i % len(kinds)](i) for i in range(properties)}
    return {"type": "object", "properties": props, "required": sorted(props), "additionalProperties": False}


def json_format(schema: dict[str, Any]) -> ResponseFormat:
    return ResponseFormat(type="json_schema", schema=json.dumps(schema), name="bench")


def load(name: str) -> CausalLM:
    served = find_serving(name, host_provider())
    if served is not None:
        directory = served.directory
    elif name == "tiny-llama":
        directory = prepare(name, providers=(ROOT_PROVIDER,)).directory
    else:
        raise SystemExit(f"{name} is not prepared; run `nrt models prepare {name}` first")
    return CausalLM(build_session(load_weights(directory), ["CPUExecutionProvider"]), Path(directory))


async def decode_rate(engine: BatchingGenerator, n: int, tokens: int, fmt: ResponseFormat | None) -> float:
    """Aggregate decode tokens/s of ``n`` concurrent requests (from each one's first token to the last one's end)."""

    async def one(seed: int) -> tuple[float, float, int]:
        request = GenerationRequest(
            prompt=f"{PROMPT} #{seed}", max_tokens=tokens, ignore_eos=True, seed=seed, response_format=fmt
        )
        first = last = 0.0
        count = 0
        async for chunk in engine.generate(request):
            last = time.perf_counter()
            first = first or last
            count += len(chunk.token_ids)
            assert chunk.finish_reason in (None, "length"), chunk.finish_reason
        return first, last, count

    runs = await asyncio.gather(*(one(i) for i in range(n)))
    start, end = max(r[0] for r in runs), max(r[1] for r in runs)  # all rows decoding together
    return sum(r[2] - 1 for r in runs) / (end - start)


async def first_token_ms(engine: BatchingGenerator, fmt: ResponseFormat | None) -> float:
    started = time.perf_counter()
    request = GenerationRequest(prompt=PROMPT, max_tokens=2, response_format=fmt)
    async for _ in engine.generate(request):
        return (time.perf_counter() - started) * 1e3
    raise AssertionError("no token")


async def main(model: str, tokens: int) -> None:
    lm = load(model)
    engine = BatchingGenerator(lm, max_batch_size=max(BATCHES))
    print(f"structured outputs on {model} (vocabulary {lm.spec.vocab_size:,}), {tokens} tokens per request")
    try:
        started = time.perf_counter()
        await first_token_ms(engine, json_format(RECORD))  # builds llguidance's tokenizer, warms the model
        report("first constrained request: tokenizer + compile", (time.perf_counter() - started) * 1e3, "ms")
        endless = json_format(ENDLESS)
        await decode_rate(engine, 1, 4, endless)  # compiled once, outside the rounds
        for n in BATCHES:
            free: list[float] = []
            bound: list[float] = []
            for _ in range(ROUNDS):
                free.append(await decode_rate(engine, n, tokens, None))
                bound.append(await decode_rate(engine, n, tokens, endless))
            ratio = max(bound) / max(free)
            report(f"decode, batch {n}, free", max(free), "tokens/s")
            report(
                f"decode, batch {n}, json schema",
                max(bound),
                "tokens/s",
                ratio,
                "free",
                ">= 0.9",
                met=ratio >= 0.9,
            )
        large = json_format(large_schema())
        free_ttft = min([await first_token_ms(engine, None) for _ in range(ROUNDS)])
        compiled = await first_token_ms(engine, large)
        cached = min([await first_token_ms(engine, large) for _ in range(ROUNDS)])
        report("time to first token, free", free_ttft, "ms", precision=1)
        report("time to first token, large schema, first", compiled, "ms", compiled / free_ttft, "free", precision=1)
        report("time to first token, large schema, cached", cached, "ms", cached / free_ttft, "free", precision=1)
    finally:
        await engine.aclose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny-llama")
    parser.add_argument("--tokens", type=int, default=64)
    args = parser.parse_args()
    asyncio.run(main(args.model, args.tokens))
