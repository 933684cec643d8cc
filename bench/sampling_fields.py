"""Sampling fields benchmark: what logprobs, the penalties and logit_bias cost the engine's decode, in one run.

The batching engine (``BatchingGenerator``, in process: the adjustments live in its sampling loop,
so NATS would only add noise) serves the same prompts greedy and plain, then with each of:
``logprobs`` (+ 5 alternatives), ``presence_penalty`` + ``frequency_penalty``, a 32-token
``logit_bias``, and all of them at once; in alternating rounds, best of each. Decode throughput at
batch 1 and 8 is the aggregate tokens/s of ``n`` concurrent requests decoding exactly ``--tokens``
tokens each; every line is a ratio against the plain rows of the same run. A plain greedy row needs
only its argmax from the device, a row with any of these needs its whole row of logits on the host:
that copy is most of the cost on a large vocabulary (Gemma's 262k). Target: at least 0.8 of plain.

    python -m bench.sampling_fields [--model tiny-llama|gemma3-270m] [--tokens 64]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from bench.common import report
from bench.structured import load
from nrt.adapters.inference import BatchingGenerator, GenerationRequest

ROUNDS = 5
BATCHES = (1, 8)
PROMPT = "Summarise the customer's billing problem."


def variants(vocab: int) -> dict[str, dict[str, Any]]:
    bias = tuple((token, 1.0 if token % 2 else -1.0) for token in range(7, min(vocab, 7 + 32 * 97), 97))
    return {
        "plain": {},
        "logprobs + 5 alternatives": {"logprobs": True, "top_logprobs": 5},
        "presence + frequency penalty": {"presence_penalty": 0.5, "frequency_penalty": 0.5},
        f"logit_bias ({len(bias)} tokens)": {"logit_bias": bias},
        "all of them": {
            "logprobs": True,
            "top_logprobs": 5,
            "presence_penalty": 0.5,
            "frequency_penalty": 0.5,
            "logit_bias": bias,
        },
    }


async def decode_rate(engine: BatchingGenerator, n: int, tokens: int, fields: dict[str, Any]) -> float:
    """Aggregate decode tokens/s of ``n`` concurrent requests (from each one's first token to the last one's end)."""

    async def one(seed: int) -> tuple[float, float, int]:
        request = GenerationRequest(prompt=f"{PROMPT} #{seed}", max_tokens=tokens, ignore_eos=True, **fields)
        first = last = 0.0
        count = 0
        async for chunk in engine.generate(request):
            last = time.perf_counter()
            first = first or last
            count += len(chunk.token_ids)
            if fields.get("logprobs"):
                assert len(chunk.logprobs) == len(chunk.token_ids)
        return first, last, count

    runs = await asyncio.gather(*(one(i) for i in range(n)))
    start, end = max(r[0] for r in runs), max(r[1] for r in runs)  # all rows decoding together
    return sum(r[2] - 1 for r in runs) / (end - start)


async def main(model: str, tokens: int) -> None:
    lm = load(model)
    engine = BatchingGenerator(lm, max_batch_size=max(BATCHES))
    print(f"sampling fields on {model} (vocabulary {lm.spec.vocab_size:,}), {tokens} tokens per request, greedy")
    cases = variants(lm.spec.vocab_size)
    try:
        await decode_rate(engine, 1, 4, {})  # warm the model
        for n in BATCHES:
            rates: dict[str, list[float]] = {name: [] for name in cases}
            for _ in range(ROUNDS):
                for name, fields in cases.items():
                    rates[name].append(await decode_rate(engine, n, tokens, fields))
            plain = max(rates["plain"])
            report(f"decode, batch {n}, plain", plain, "tokens/s")
            for name in list(cases)[1:]:
                ratio = max(rates[name]) / plain
                report(
                    f"decode, batch {n}, {name}",
                    max(rates[name]),
                    "tokens/s",
                    ratio,
                    "plain",
                    ">= 0.8",
                    met=ratio >= 0.8,
                )
    finally:
        await engine.aclose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny-llama")
    parser.add_argument("--tokens", type=int, default=64)
    args = parser.parse_args()
    asyncio.run(main(args.model, args.tokens))
