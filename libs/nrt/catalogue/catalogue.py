"""The built-in models: one table from name to recipe."""

from __future__ import annotations

from nrt.catalogue.builders import gemma3, minilm, tiny_llama
from nrt.catalogue.entry import CatalogueEntry

_MB = 1_000_000

CATALOGUE: tuple[CatalogueEntry, ...] = (
    CatalogueEntry(
        name=gemma3.NAME,
        kind="causal-lm",
        recipe=gemma3.RECIPE,
        description="Gemma 3 270M base (GGUF Q4_K_M from PyPI) as int8 ONNX with KV cache; completion/few-shot prompts",
        approx_bytes=475 * _MB,
        steps=gemma3.STEPS,
        build=gemma3.build,
    ),
    CatalogueEntry(
        name=minilm.NAME,
        kind="encoder",
        recipe=minilm.RECIPE,
        description="all-MiniLM-L6-v2 sentence embeddings (384-d, mean pooled, normalised) as ONNX",
        approx_bytes=91 * _MB,
        steps=minilm.STEPS,
        build=minilm.build,
    ),
    CatalogueEntry(
        name=tiny_llama.NAME,
        kind="causal-lm",
        recipe=tiny_llama.RECIPE,
        description="a tiny seeded random Llama (2 layers, hidden 64, byte tokenizer) for fast tests; gibberish output",
        approx_bytes=1 * _MB,
        steps=tiny_llama.STEPS,
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
