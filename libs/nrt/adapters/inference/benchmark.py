"""Measure the engine against the bare ONNX Runtime loop on the same session, in one run.

    python -m nrt.adapters.inference.benchmark ARTIFACT_DIR [--tokens N] [--repeats R] [--json]

Reports (medians over interleaved repeats, so machine noise hits both sides alike):

* single stream: end-to-end tokens/s, decode tokens/s and time to first token of
  ``BatchingGenerator.generate`` vs :func:`bare_greedy`, and their ratio;
* aggregate tokens/s with 1, 4 and 8 concurrent requests (continuous batching);
* time to first token of a conversation's second turn with and without its session cache.

The worker benchmark (``bench/worker.py``) can call these functions directly.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Sequence
from pathlib import Path

import msgspec

from nrt.adapters.inference.bare import bare_greedy
from nrt.adapters.inference.batching import BatchingGenerator
from nrt.adapters.inference.causal import CausalLM
from nrt.adapters.inference.structs import Chunk, GenerationRequest
from nrt.adapters.inference.templates import ChatMessage, PromptTemplate
from nrt.adapters.inference.transcript import encode_prompt


class SingleStream(msgspec.Struct, frozen=True):
    new_tokens: int
    prompt_tokens: int
    bare_tokens_per_s: float  # end to end, prefill included
    engine_tokens_per_s: float
    ratio: float  # engine / bare, end to end
    bare_decode_tokens_per_s: float
    engine_decode_tokens_per_s: float
    decode_ratio: float
    bare_ttft_ms: float
    engine_ttft_ms: float


class Concurrency(msgspec.Struct, frozen=True):
    concurrency: int
    aggregate_tokens_per_s: float
    speedup_vs_bare: float  # aggregate / bare single-stream tokens/s
    mean_ttft_ms: float
    max_batch: int


class SessionReuse(msgspec.Struct, frozen=True):
    prompt_tokens: int
    cached_tokens: int
    ttft_cached_ms: float
    ttft_uncached_ms: float
    speedup: float
    same_output: bool


class Report(msgspec.Struct, frozen=True):
    model: str
    provider: str
    single: SingleStream
    concurrency: list[Concurrency]
    session: SessionReuse


_TEXT = "The quick brown fox jumps over the lazy dog. A journey of a thousand miles begins with one step. "


def _prompt_ids(model: CausalLM, tokens: int) -> list[int]:
    ids = model.encode(_TEXT * (1 + tokens // 8))
    return ids[:tokens]


async def _run(gen: BatchingGenerator, request: GenerationRequest) -> tuple[list[Chunk], float]:
    started = time.perf_counter()
    chunks = [c async for c in gen.generate(request)]
    return chunks, time.perf_counter() - started


async def single_stream(
    model: CausalLM, gen: BatchingGenerator, *, prompt_tokens: int, new_tokens: int, repeats: int
) -> SingleStream:
    ids = _prompt_ids(model, prompt_tokens)
    request = GenerationRequest(prompt_ids=tuple(ids), max_tokens=new_tokens, ignore_eos=True)
    bare_s: list[float] = []
    bare_first_s: list[float] = []
    engine_s: list[float] = []
    engine_ttft: list[float] = []
    engine_decode: list[float] = []
    bare_greedy(model.session, ids, 2)  # warm both paths
    await _run(gen, GenerationRequest(prompt_ids=tuple(ids), max_tokens=2))
    for _ in range(repeats):
        started = time.perf_counter()
        bare_greedy(model.session, ids, 1)
        bare_first_s.append(time.perf_counter() - started)
        started = time.perf_counter()
        expected = bare_greedy(model.session, ids, new_tokens)
        bare_s.append(time.perf_counter() - started)
        chunks, elapsed = await _run(gen, request)
        engine_s.append(elapsed)
        timings = chunks[-1].timings
        assert timings is not None
        engine_ttft.append(timings.ttft_ms)
        engine_decode.append(timings.decode_tokens_per_s)
        if [t for c in chunks for t in c.token_ids] != expected:
            raise AssertionError("engine and bare loop disagree on greedy tokens")
    bare = statistics.median(bare_s)
    first = statistics.median(bare_first_s)
    bare_decode = (new_tokens - 1) / max(bare - first, 1e-9)
    engine = statistics.median(engine_s)
    engine_decode_rate = statistics.median(engine_decode)
    return SingleStream(
        new_tokens=new_tokens,
        prompt_tokens=len(ids),
        bare_tokens_per_s=new_tokens / bare,
        engine_tokens_per_s=new_tokens / engine,
        ratio=bare / engine,
        bare_decode_tokens_per_s=bare_decode,
        engine_decode_tokens_per_s=engine_decode_rate,
        decode_ratio=engine_decode_rate / bare_decode,
        bare_ttft_ms=first * 1e3,
        engine_ttft_ms=statistics.median(engine_ttft),
    )


async def concurrency(
    model: CausalLM,
    gen: BatchingGenerator,
    *,
    levels: Sequence[int],
    prompt_tokens: int,
    new_tokens: int,
    repeats: int,
    bare_tokens_per_s: float,
) -> list[Concurrency]:
    out: list[Concurrency] = []
    for level in levels:
        # Different prompt lengths, so rows really are padded against each other.
        requests = [
            GenerationRequest(
                prompt_ids=tuple(_prompt_ids(model, max(4, prompt_tokens - 3 * i))),
                max_tokens=new_tokens,
                ignore_eos=True,
            )
            for i in range(level)
        ]
        rates: list[float] = []
        ttfts: list[float] = []
        max_batch = 0
        for _ in range(repeats):
            started = time.perf_counter()
            results = await asyncio.gather(*(_run(gen, r) for r in requests))
            wall = time.perf_counter() - started
            rates.append(level * new_tokens / wall)
            for chunks, _ in results:
                timings = chunks[-1].timings
                assert timings is not None
                ttfts.append(timings.ttft_ms)
                max_batch = max(max_batch, timings.batch_size_max)
        rate = statistics.median(rates)
        out.append(
            Concurrency(
                concurrency=level,
                aggregate_tokens_per_s=rate,
                speedup_vs_bare=rate / bare_tokens_per_s,
                mean_ttft_ms=statistics.fmean(ttfts),
                max_batch=max_batch,
            )
        )
    return out


async def session_reuse(
    model: CausalLM, gen: BatchingGenerator, *, history_tokens: int, new_tokens: int, repeats: int
) -> SessionReuse:
    template = PromptTemplate()
    system = model.decode(_prompt_ids(model, history_tokens)[1:])
    cached_ms: list[float] = []
    fresh_ms: list[float] = []
    same = True
    prompt_tokens = cached_tokens = 0
    for i in range(repeats):
        session_id = f"bench-{i}"
        history = [ChatMessage("system", system), ChatMessage("user", "Tell me a story.")]
        turn1, _ = await _run(
            gen, GenerationRequest(prompt=template.render(history), max_tokens=new_tokens, session_id=session_id)
        )
        history += [
            ChatMessage("assistant", "".join(c.text for c in turn1)),
            ChatMessage("user", "And then?"),
        ]
        prompt2 = template.render(history)
        # the ids turn 2 runs on (turn 1's own where the text extends it), so fresh runs the same ones
        ids2 = encode_prompt(prompt2, model.encode, model.tokenizer, gen.sessions.transcript(session_id)).ids
        cached, _ = await _run(gen, GenerationRequest(prompt=prompt2, max_tokens=new_tokens, session_id=session_id))
        fresh, _ = await _run(gen, GenerationRequest(prompt_ids=tuple(ids2), max_tokens=new_tokens))
        gen.evict_session(session_id)
        cached_t, fresh_t, usage = cached[-1].timings, fresh[-1].timings, cached[-1].usage
        assert cached_t is not None
        assert fresh_t is not None
        assert usage is not None
        cached_ms.append(cached_t.ttft_ms)
        fresh_ms.append(fresh_t.ttft_ms)
        prompt_tokens, cached_tokens = usage.prompt_tokens, usage.cached_tokens
        same = same and [t for c in cached for t in c.token_ids] == [t for c in fresh for t in c.token_ids]
    with_cache = statistics.median(cached_ms)
    without = statistics.median(fresh_ms)
    return SessionReuse(
        prompt_tokens=prompt_tokens,
        cached_tokens=cached_tokens,
        ttft_cached_ms=with_cache,
        ttft_uncached_ms=without,
        speedup=without / with_cache,
        same_output=same,
    )


async def run_all(
    artifact_dir: Path,
    *,
    new_tokens: int,
    prompt_tokens: int,
    repeats: int,
    levels: Sequence[int] = (1, 4, 8),
) -> Report:
    model = CausalLM.load(artifact_dir)
    budget = model.spec.context_length
    prompt_tokens = min(prompt_tokens, budget // 4)
    new_tokens = min(new_tokens, budget - prompt_tokens - 1)
    gen = BatchingGenerator(model, max_batch_size=max(levels))
    try:
        single = await single_stream(model, gen, prompt_tokens=prompt_tokens, new_tokens=new_tokens, repeats=repeats)
        conc = await concurrency(
            model,
            gen,
            levels=levels,
            prompt_tokens=prompt_tokens,
            new_tokens=new_tokens,
            repeats=max(1, repeats // 2),
            bare_tokens_per_s=single.bare_tokens_per_s,
        )
        history = min(budget // 2, 1024)
        session = await session_reuse(model, gen, history_tokens=history, new_tokens=8, repeats=repeats)
    finally:
        gen.close()
    return Report(model=str(artifact_dir), provider=model.provider, single=single, concurrency=conc, session=session)


def format_report(report: Report) -> str:
    s = report.single
    lines = [
        f"model {report.model} on {report.provider}",
        f"single stream ({s.prompt_tokens} prompt + {s.new_tokens} new tokens, greedy, outputs identical):",
        f"  end to end   bare {s.bare_tokens_per_s:8.1f} tok/s   engine {s.engine_tokens_per_s:8.1f} tok/s"
        f"   ratio {s.ratio:.3f}",
        f"  decode       bare {s.bare_decode_tokens_per_s:8.1f} tok/s   engine {s.engine_decode_tokens_per_s:8.1f}"
        f" tok/s   ratio {s.decode_ratio:.3f}",
        f"  ttft         bare {s.bare_ttft_ms:8.2f} ms      engine {s.engine_ttft_ms:8.2f} ms",
        "concurrent requests (continuous batching):",
    ]
    for c in report.concurrency:
        lines.append(
            f"  {c.concurrency:2d} concurrent: {c.aggregate_tokens_per_s:8.1f} tok/s aggregate"
            f" ({c.speedup_vs_bare:.2f}x bare single stream), mean ttft {c.mean_ttft_ms:.1f} ms,"
            f" max batch {c.max_batch}"
        )
    r = report.session
    lines.append(
        f"session turn 2 ({r.prompt_tokens} prompt tokens, {r.cached_tokens} from cache): ttft"
        f" {r.ttft_cached_ms:.2f} ms with cache vs {r.ttft_uncached_ms:.2f} ms without"
        f" ({r.speedup:.1f}x), same output: {r.same_output}"
    )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("artifact_dir", type=Path)
    parser.add_argument("--tokens", type=int, default=128, help="new tokens per request")
    parser.add_argument("--prompt-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    report = asyncio.run(
        run_all(args.artifact_dir, new_tokens=args.tokens, prompt_tokens=args.prompt_tokens, repeats=args.repeats)
    )
    print(msgspec.json.encode(report).decode() if args.json else format_report(report))


if __name__ == "__main__":
    main()
