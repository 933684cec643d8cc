"""Worker benchmark: the specialist worker over NATS against a floor and two peers, in one run.

1. Floor: a bare ONNX Runtime greedy loop (``nrt.adapters.inference.bare_greedy``) over the same
   artifact: time to first token and decode tokens/s. The worker's figures are measured
   by a client over NATS (request published -> chunks received); target ratio >= 0.9.
2. Aggregate decode throughput through the worker at 1, 4 and 8 concurrent requests
   (the worker batches the decode steps of concurrent requests); on a GPU at 1, 8, 32, 64.
3. Sessions: time to first token of a conversation's second turn when the worker kept the
   first turn's KV cache (it prefills only the new tokens) vs the same prompt without it; and
   shared prefixes: time to first token of turn 1 of a new session on a specialist whose prompt
   starts with a 300-token template the worker holds the KV of (its other conversations started
   with it) vs the same turn with a template seen for the first time; target <= 0.3x.
4. Peers on CPU (see :mod:`bench.peers`), on the same prompt ids: onnxruntime-genai on the
   same ONNX graph (single stream, and a static batch of 8), and llama.cpp on the GGUF the
   Gemma artifact comes from (single stream, and 8 requests served one after another on its
   one context), with the issue's CPU targets: decode >= 1.0x llama.cpp, time to first
   token >= 0.8x its speed, aggregate at 8 concurrent >= 1.5x.
5. On a GPU (CUDAExecutionProvider offered): the worker and the floor run the artifact's
   ``cuda`` variant when it is built; targets: decode >= 0.9x the bare ORT CUDA loop,
   aggregate at 32 concurrent >= 10x single-stream. The CPU peers are not run there.
6. Weight formats (issue 26), on CPU: the model prepared from one Hugging Face checkpoint in each
   of ``--formats`` (default int8 and int4) as an operator's checkpoint is (a manifest's
   ``quantization: int8 | int4 | none``; Gemma: the checkpoint de-quantised from the GGUF, as in
   ``bench.formats``; tiny-llama: a tiny random Llama), each served by the worker, in alternating
   rounds with llama.cpp on the GGUF: bytes, time to first token, decode tokens/s against
   llama.cpp's and the perplexity of one fixed text beside fp32's. Targets (Gemma): int4 decode
   >= 1.0x llama.cpp's, int4 perplexity <= 1.15x fp32's.

Single-stream figures are measured in alternating rounds (floor, worker, peers), best of
each, so that a noisy neighbour slows all of them rather than one.

    python -m bench.worker [--model gemma3-270m|tiny-llama] [--tokens 64] [--spin run|always|never] [--formats int8,int4] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import get_args

import msgspec
from nats.aio.client import Client

from bench.common import FIGURES, report
from bench.models import (
    DOCUMENT,
    LABEL,
    PROMPT,
    Bare,
    gemma_checkpoint,
    gemma_gguf,
    parse_formats,
    perplexity,
    prepare_formats,
    report_format,
    tiny_checkpoint,
)
from bench.peers import (
    Figures,
    GenaiPeer,
    LlamaCppPeer,
    best,
    genai_available,
    genai_model_dir,
    llama_cpp_available,
    on_peer_thread,
)
from nrt.adapters import settings
from nrt.adapters.bus import rpc, subjects
from nrt.adapters.bus.broker import start_broker
from nrt.adapters.bus.connection import connect
from nrt.adapters.bus.jetstream import ensure_events_stream
from nrt.adapters.catalogue import ROOT_PROVIDER, Provider, find_serving, host_provider, load_record, prepare
from nrt.adapters.catalogue.checkpoints import CpuFormat
from nrt.adapters.inference import Spin, active_provider
from nrt.adapters.inference.causal import CausalLM
from nrt.core.protocol import ControlCommand, ControlReply, GenerateChunk, GenerateRequest, SamplingParams
from nrt.core.vocabulary import Reason, Tier
from nrt.testing.servers import nats_server

ROUNDS = 5
AGGREGATE_ROUNDS = 2
CPU_CONCURRENCY = (1, 4, 8)
GPU_CONCURRENCY = (1, 8, 32, 64)
GPU_TARGET_CONCURRENCY = 32  # aggregate there >= 10x single-stream
PEER_CONCURRENCY = 8  # the CPU aggregate compared with the peers'
LLAMA_CPP = "llama.cpp"
GENAI = "onnxruntime-genai"


def artifact(name: str, provider: Provider) -> Path:
    """The prepared catalogue artifact's variant that serves ``provider`` (tiny-llama is built when missing)."""
    served = find_serving(name, provider)
    if served is not None:
        return served.directory
    if name != "tiny-llama":
        raise SystemExit(f"{name} is not prepared; run `nrt models prepare {name}` first")
    return prepare(name, providers=(ROOT_PROVIDER,)).directory


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


TEMPLATE_TOKENS = 300  # the shared-prefix figure's template
SHARED_PREFIX_TARGET = 0.3  # its time to first token at most this much of the time without it


def template_of(encode: Callable[[str], list[int]], tokens: int) -> str:
    """A specialist's template of about ``tokens`` tokens: instructions, then the document's sentences."""
    text = "You are the city-history specialist. Answer from the notes below, in one sentence.\nNotes:"
    words = DOCUMENT.split()
    i = 0
    while len(encode(text)) < tokens:
        text += " " + words[i % len(words)]
        i += 1
    return text


async def shared_prefix_turns(nc: Client, model_id: str, encode: Callable[[str], list[int]]) -> None:
    """Turn 1 of new sessions whose prompts start with one template (its KV held by the worker after two
    earlier prompts started with it) vs turn 1 with a template no earlier prompt started with, alternating."""
    template = template_of(encode, TEMPLATE_TOKENS)

    def turn1(head: str, i: int) -> str:
        return f"{head}{template}\nQuestion {i}: where does the story begin?\nAnswer:"

    # two conversations with other questions first: the first prompt's ids are noted, the second proves the
    # template shared and stores its KV (copied from its own); the measured turns then start from it
    for i in range(ROUNDS, ROUNDS + 2):
        await through_worker(nc, model_id, 1, f"prefix-seed-{i}", turn1("", i), f"bench-prefix-seed-{i}")
    shared, cold = float("inf"), float("inf")
    for i in range(ROUNDS):
        held = turn1("", i)
        fresh = turn1(f"Session {i} of a new specialist. ", i)  # starts differently: nothing to reuse
        # two tokens: what a prompt shares is stored (or its ids noted) after its first token is out, not before
        shared = min(shared, (await through_worker(nc, model_id, 2, f"prefix-{i}", held, f"bench-prefix-{i}"))[0])
        cold = min(cold, (await through_worker(nc, model_id, 2, f"noprefix-{i}", fresh, f"bench-noprefix-{i}"))[0])
    tokens = len(encode(template))
    report(f"turn 1, {tokens}-token template, no shared prefix: first token", cold, "ms", precision=1)
    ratio = shared / cold
    report(
        f"shared-prefix turn 1, {tokens}-token template: first token",
        shared,
        "ms",
        ratio,
        "no shared prefix (lower is better)",
        f"<= {SHARED_PREFIX_TARGET}",
        precision=1,
        met=ratio <= SHARED_PREFIX_TARGET,
    )


class Peers:
    """The CPU peers that load here, on the floor's prompt ids; each says why when it does not."""

    def __init__(self, stack: contextlib.ExitStack, model: str, path: Path) -> None:
        self.genai: GenaiPeer | None = None
        self.llama_cpp: LlamaCppPeer | None = None
        self.notes: list[str] = []
        if (missing := genai_available()) is not None:
            self.notes.append(f"onnxruntime-genai peer: {missing}")
        else:
            try:
                self.genai = GenaiPeer(stack.enter_context(genai_model_dir(path)))
            except Exception as exc:  # report why genai refuses this graph, and go on without it
                self.notes.append(f"onnxruntime-genai peer: cannot load {path / 'model.onnx'}: {exc}")
        if model != "gemma3-270m":
            self.notes.append("llama.cpp peer: only for gemma3-270m (the catalogue model converted from a GGUF)")
        elif (missing := llama_cpp_available()) is not None:
            self.notes.append(f"llama.cpp peer: {missing}")
        else:
            self.llama_cpp = LlamaCppPeer(gemma_gguf())

    def runners(self) -> list[tuple[str, GenaiPeer | LlamaCppPeer]]:
        named: list[tuple[str, GenaiPeer | LlamaCppPeer]] = []
        if self.llama_cpp is not None:
            named.append((LLAMA_CPP, self.llama_cpp))
        if self.genai is not None:
            named.append((GENAI, self.genai))
        return named


async def load_resident(nc: Client, model_id: str, path: Path) -> None:
    """Have the worker load the artifact at ``path`` as ``model_id`` and make it resident."""
    await rpc.request(
        nc,
        subjects.control("bench"),
        ControlCommand(action="load", model_id=model_id, source=str(path), tier=Tier.RESIDENT, reason=Reason.COMMAND),
        ControlReply,
        timeout=600,
    )


@dataclass(frozen=True)
class WeightFormats:
    """The model prepared from one checkpoint in each weight format the worker serves, and in fp32 (the
    perplexity's reference), with the prompt's and the fixed text's token ids."""

    model: str
    served: tuple[CpuFormat, ...]
    directories: dict[CpuFormat, Path]
    prompt_ids: list[int]
    document_ids: list[int]


def weight_formats(model: str, formats: tuple[CpuFormat, ...]) -> WeightFormats | str:
    """Gemma 3 270M (the checkpoint de-quantised from its GGUF) or a tiny Llama checkpoint (``tiny-llama``),
    prepared in each of ``formats`` as an operator's checkpoint is (``quantization:``), as in
    ``bench.formats``; why not, for another model."""
    root = settings.nrt_home() / "bench"
    root.mkdir(parents=True, exist_ok=True)
    if model == "gemma3-270m":
        checkpoint = gemma_checkpoint(root)
    elif model == "tiny-llama":
        checkpoint = tiny_checkpoint(root)
    else:
        return f"weight formats: only for gemma3-270m (its GGUF's checkpoint) and tiny-llama, not {model}"
    directories = prepare_formats(checkpoint, dict.fromkeys(("none", *formats)))
    tokens = CausalLM.load(directories[formats[0]])
    return WeightFormats(model, formats, directories, tokens.encode(PROMPT), tokens.encode(DOCUMENT))


def format_id(fmt: CpuFormat) -> str:
    return f"format-{LABEL[fmt]}"


async def serve_formats(nc: Client, formats: WeightFormats, n: int, llama_cpp: LlamaCppPeer | None) -> None:
    """Each format served by the worker, in alternating rounds with llama.cpp on the GGUF (Gemma) and, for
    a fused graph, onnxruntime-genai on that very graph (its own builder's layout): bytes, time to first
    token, decode (vs llama.cpp's, vs genai's) and the fixed text's perplexity beside fp32's."""
    for fmt in formats.served:
        await load_resident(nc, format_id(fmt), formats.directories[fmt])
        await through_worker(nc, format_id(fmt), 4)  # warm-up
    runs: dict[CpuFormat, list[tuple[float, float]]] = {fmt: [] for fmt in formats.served}
    llama_runs: list[Figures] = []
    genai_runs: dict[CpuFormat, list[Figures]] = {}
    with contextlib.ExitStack() as stack:
        genai: dict[CpuFormat, GenaiPeer] = {}
        if genai_available() is None:
            for fmt in formats.served:
                if fmt.startswith("fused-"):
                    genai[fmt] = GenaiPeer(stack.enter_context(genai_model_dir(formats.directories[fmt])))
                    genai_runs[fmt] = []
        for _ in range(ROUNDS):
            for fmt in formats.served:
                runs[fmt].append((await through_worker(nc, format_id(fmt), n, format_id(fmt)))[:2])
                if fmt in genai:
                    genai_runs[fmt].append(await on_peer_thread(genai[fmt].single, formats.prompt_ids, n))
            if llama_cpp is not None:
                llama_runs.append(await on_peer_thread(llama_cpp.single, formats.prompt_ids, n))
        genai.clear()
    for fmt in formats.served:  # the worker's RAM back before the perplexities' sessions are built
        await rpc.request(
            nc,
            subjects.control("bench"),
            ControlCommand(action="unload", model_id=format_id(fmt), reason=Reason.COMMAND),
            ControlReply,
            timeout=60,
        )
    fp32 = await asyncio.to_thread(perplexity, formats.directories["none"], formats.document_ids)
    names = ", ".join(LABEL[fmt] for fmt in formats.served)
    quantization = " | ".join(formats.served)
    print(
        f"weight formats ({names}): {formats.model} prepared from one checkpoint as an operator's model "
        f"(quantization: {quantization}), each served by the worker over NATS",
        flush=True,
    )
    llama = best(llama_runs) if llama_runs else None
    if llama is not None:
        report("llama.cpp (the Q4_K_M GGUF): time to first token", llama.ttft_ms, "ms", precision=1)
        report("llama.cpp (the Q4_K_M GGUF): decode", llama.decode_tokens_per_s, "tokens/s", precision=1)
    if "none" not in formats.served:
        report("fp32 (not served): perplexity of the fixed text", fp32, "", precision=2)
    for fmt in formats.served:
        ppl = (
            fp32
            if fmt == "none"
            else await asyncio.to_thread(perplexity, formats.directories[fmt], formats.document_ids)
        )
        report_format(
            f"worker, {LABEL[fmt]}",
            fmt,
            formats.directories[fmt],
            min(run[0] for run in runs[fmt]),
            max(run[1] for run in runs[fmt]),
            llama.decode_tokens_per_s if llama is not None else None,
            ppl,
            fp32,
            targets=formats.model == "gemma3-270m",
            genai_decode=best(genai_runs[fmt]).decode_tokens_per_s if genai_runs.get(fmt) else None,
        )


async def aggregate(nc: Client, n: int, concurrency: int) -> float:
    """Tokens/s through the worker of ``concurrency`` requests started together."""
    started = time.perf_counter()
    results = await asyncio.gather(*(through_worker(nc, "m", n, i) for i in range(concurrency)))
    return sum(r[2] for r in results) / (time.perf_counter() - started)


class WorkerFigures(msgspec.Struct, frozen=True):
    ttft_ms: float
    decode_tokens_per_s: float
    aggregate_tokens_per_s: float  # at PEER_CONCURRENCY concurrent


async def main(model: str, n: int, spin: Spin, formats: tuple[CpuFormat, ...] = ("int8", "int4")) -> None:
    from nrt.hosting.resources import detect
    from nrt.hosting.worker import Worker

    provider = host_provider()
    gpu = provider == "cuda"
    levels = GPU_CONCURRENCY if gpu else CPU_CONCURRENCY
    path = artifact(model, provider)
    # prepared first (once per host: minutes for Gemma the first time), measured after the rest
    prepared = await asyncio.to_thread(weight_formats, model, formats) if formats and not gpu else None
    with (
        contextlib.ExitStack() as stack,
        tempfile.TemporaryDirectory() as nats_dir,
        nats_server(nats_dir, env_var=None, use_docker=False) as url,
    ):
        print(f"worker benchmark: {model} ({path}), {n} greedy tokens, prompt {PROMPT!r}", flush=True)
        if gpu and load_record(path).provider != provider:
            print(f"note: no {provider} variant of {model} is built: `nrt models prepare {model} --provider cuda`")
        floor = await asyncio.to_thread(Bare, path, spin)
        print(f"provider: {active_provider(floor.session)}", flush=True)
        print(
            f"ONNX Runtime (floor and worker): default intra-op threads, spin-wait {spin!r} (NRT_WORKER_ORT_SPIN); "
            f"llama.cpp: n_threads={os.cpu_count()}, its threads spin-wait by design",
            flush=True,
        )
        peers = None if gpu else await on_peer_thread(Peers, stack, model, path)
        nc = await connect(url, "bench-worker")
        await ensure_events_stream(nc.jetstream())
        worker_broker = await start_broker(url, "bench-worker-service")
        worker = Worker(worker_broker, detect(), worker_id="bench", max_batch_size=max(levels), ort_spin=spin)
        await worker.start()
        try:
            await load_resident(nc, "m", path)
            await through_worker(nc, "m", 4)  # warm-up
            runners = peers.runners() if peers is not None else []
            for _, runner in runners:
                await on_peer_thread(runner.single, floor.ids, 4)  # warm-up
            bare_runs, worker_runs = [], []
            peer_runs: dict[str, list[Figures]] = {name: [] for name, _ in runners}
            for _ in range(ROUNDS):
                bare_runs.append(await asyncio.to_thread(floor.round, n))
                worker_runs.append((await through_worker(nc, "m", n))[:2])
                for name, runner in runners:
                    peer_runs[name].append(await on_peer_thread(runner.single, floor.ids, n))
            bare_ttft, bare_tps = min(r[0] for r in bare_runs), max(r[1] for r in bare_runs)
            ttft, tps = min(r[0] for r in worker_runs), max(r[1] for r in worker_runs)
            floor_name = "bare ORT CUDA loop" if gpu else "bare loop"
            report(f"bare ONNX Runtime loop ({provider}): time to first token", bare_ttft, "ms", precision=1)
            report(
                "worker over NATS: time to first token",
                ttft,
                "ms",
                bare_ttft / ttft,
                f"{floor_name} (higher is better)",
                ">= 0.9",
                precision=1,
            )
            report(f"bare ONNX Runtime loop ({provider}): decode", bare_tps, "tokens/s")
            report(
                "worker over NATS: decode",
                tps,
                "tokens/s",
                tps / bare_tps,
                floor_name,
                ">= 0.9",
                met=tps / bare_tps >= 0.9 if gpu else None,
            )
            throughput: dict[int, float] = {}
            peer_aggregates: dict[str, float] = {name: 0.0 for name, _ in runners}
            for concurrency in levels:
                throughput[concurrency] = 0.0
                for _ in range(AGGREGATE_ROUNDS):  # alternating with the peers' at the compared level
                    throughput[concurrency] = max(throughput[concurrency], await aggregate(nc, n, concurrency))
                    if concurrency != PEER_CONCURRENCY:
                        continue
                    for name, runner in runners:
                        together = await on_peer_thread(runner.aggregate, floor.ids, n, concurrency)
                        peer_aggregates[name] = max(peer_aggregates[name], together)
                report(
                    f"worker aggregate, {concurrency} concurrent",
                    throughput[concurrency],
                    "tokens/s",
                    throughput[concurrency] / throughput[1],
                    "1 concurrent",
                    ">= 10" if gpu and concurrency == GPU_TARGET_CONCURRENCY else "",
                    met=throughput[concurrency] / throughput[1] >= 10
                    if gpu and concurrency == GPU_TARGET_CONCURRENCY
                    else None,
                )
            await session_turns(nc, "m", 1 if model == "tiny-llama" else 6)  # tiny-llama: 512 byte tokens
            await shared_prefix_turns(nc, "m", floor.encode)
            if peers is not None:
                compare_peers(peers, WorkerFigures(ttft, tps, throughput[PEER_CONCURRENCY]), peer_runs, peer_aggregates)
            else:
                print("CPU peers (llama.cpp, onnxruntime-genai): not run on a GPU host; their targets are CPU ones")
            if isinstance(prepared, WeightFormats):
                await serve_formats(nc, prepared, n, peers.llama_cpp if peers is not None else None)
            elif isinstance(prepared, str):
                print(prepared, flush=True)
            elif formats:
                print("weight formats (CPU variants vs llama.cpp): not run on a GPU host")
        finally:
            await worker.stop()
            await worker_broker.stop()
            await nc.close()


def compare_peers(
    peers: Peers, worker: WorkerFigures, runs: dict[str, list[Figures]], aggregates: dict[str, float]
) -> None:
    """Each peer's figures, then the worker's against each, with the issue's CPU targets (vs llama.cpp)."""
    for note in peers.notes:
        print(note, flush=True)
    for name, _ in peers.runners():
        single = best(runs[name])
        together = aggregates[name]
        how = "one after another, one context" if name == LLAMA_CPP else "one static batch"
        report(f"{name}: time to first token", single.ttft_ms, "ms", precision=1)
        report(f"{name}: decode", single.decode_tokens_per_s, "tokens/s")
        report(f"{name}: aggregate, {PEER_CONCURRENCY} requests ({how})", together, "tokens/s")
        targets = name == LLAMA_CPP
        decode = worker.decode_tokens_per_s / single.decode_tokens_per_s
        speed = single.ttft_ms / worker.ttft_ms
        gain = worker.aggregate_tokens_per_s / together
        report(
            f"worker decode vs {name}",
            worker.decode_tokens_per_s,
            "tokens/s",
            decode,
            name,
            ">= 1.0" if targets else "",
            met=decode >= 1.0 if targets else None,
        )
        report(
            f"worker time to first token vs {name}",
            worker.ttft_ms,
            "ms",
            speed,
            f"{name} (speed: higher is better)",
            ">= 0.8" if targets else "",
            precision=1,
            met=speed >= 0.8 if targets else None,
        )
        report(
            f"worker aggregate, {PEER_CONCURRENCY} concurrent vs {name}",
            worker.aggregate_tokens_per_s,
            "tokens/s",
            gain,
            name,
            ">= 1.5" if targets else "",
            met=gain >= 1.5 if targets else None,
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="gemma3-270m")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument(
        "--formats",
        type=parse_formats,
        default="int8,int4",
        help="the weight formats (fp32, int8, int4) the worker also serves the model in, each prepared from one "
        "checkpoint as an operator's model is, beside llama.cpp on the GGUF (Gemma); '' leaves them out",
    )
    parser.add_argument(
        "--spin",
        choices=get_args(Spin),
        default="never",
        help="when ONNX Runtime's threads spin-wait for work, in the floor and the worker (NRT_WORKER_ORT_SPIN)",
    )
    parser.add_argument(
        "--json", type=Path, default=None, help="also write every figure reported to this file (scripts/gpu-check)"
    )
    args = parser.parse_args()
    try:
        asyncio.run(main(args.model, args.tokens, args.spin, args.formats))
    finally:
        if args.json is not None:  # what was measured, also when a later part failed
            args.json.write_text(msgspec.json.encode(FIGURES).decode() + "\n")
