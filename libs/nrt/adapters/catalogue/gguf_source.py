"""A GGUF file as an operator's checkpoint: what it is and what it is called once prepared; no weights are read.

A GGUF source is prepared as a local checkpoint is (:mod:`nrt.adapters.catalogue.checkpoints`: the
same recipe, variants, checks and cache), after its weights are de-quantised into a Hugging Face
checkpoint in the build's scratch directory (:mod:`nrt.adapters.catalogue.builders.gguf_checkpoint`).
Its provenance is ``gguf:/abs/path.gguf#<sha256 of the file>``, so the artifact's name is content
addressed: a rewritten file is a new artifact, the same file is prepared once per host.

Everything that can be told from the header is checked here, before anything is built: a file
that is missing or not a GGUF (:class:`~nrt.adapters.catalogue.gguf_header.BadGguf`), a split GGUF,
an architecture NRT cannot export (:class:`~nrt.adapters.catalogue.checkpoints.UnsupportedArchitecture`,
naming it and the supported ones), a tokenizer kind it cannot rebuild.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from nrt.adapters.catalogue.checkpoints import Checkpoint, CpuFormat, UnsupportedArchitecture, artifact_name
from nrt.adapters.catalogue.gguf_config import ARCHITECTURES, supported_architectures
from nrt.adapters.catalogue.gguf_header import BadGguf, GgufHeader, read_header
from nrt.adapters.catalogue.gguf_tokenizer import PRE_TOKENIZERS
from nrt.adapters.inference.errors import ArtifactError

PREFIX = "gguf:"
_TOKENIZERS = ("gpt2", "llama")
_FLOAT32_BYTES = 4  # the de-quantised checkpoint's weights, which the recipe's size estimates start from
_digests: dict[tuple[str, int, int, int], str] = {}  # (path, size, mtime, inode) -> sha256, for this process


def gguf_checkpoint(path: Path, fmt: CpuFormat = "int8") -> Checkpoint:
    """The checkpoint the GGUF file at ``path`` is prepared as; ``ArtifactError`` (or a kind of it) when unusable."""
    resolved = path.expanduser().resolve()
    if not resolved.exists():
        raise BadGguf(f"{PREFIX}{resolved}: no such GGUF file")
    if not resolved.is_file():
        raise BadGguf(f"{PREFIX}{resolved} is not a file (a GGUF source names one .gguf file)")
    header = read_header(resolved)
    check_usable(header)
    provenance = f"{PREFIX}{resolved}#{sha256(resolved)}"
    return Checkpoint(
        directory=resolved.parent,
        provenance=provenance,
        name=artifact_name(provenance if fmt == "int8" else f"{provenance}+{fmt}"),
        model_type=ARCHITECTURES[header.architecture],
        kind="causal-lm",
        weight_bytes=header.parameters * _FLOAT32_BYTES,
        cpu_format=fmt,
        gguf=resolved,
    )


def check_usable(header: GgufHeader) -> None:
    """Raise what stops the GGUF in ``header`` from being prepared, as far as its header tells."""
    where = f"{PREFIX}{header.path}"
    splits = int(header.fields.get("split.count") or 1)
    if splits > 1:
        raise BadGguf(
            f"{where} is part {int(header.fields.get('split.no') or 0) + 1} of a GGUF split in {splits} files; "
            f"merge them into one first (llama-gguf-split --merge <first part> <merged.gguf>)"
        )
    arch = header.architecture
    if arch not in ARCHITECTURES:
        raise UnsupportedArchitecture(
            f"{where}: GGUF architecture {arch or '(none)'!r} is not supported; supported are "
            f"{supported_architectures()} (llama.cpp's names: Mistral's files say llama, Gemma 3's gemma3)"
        )
    if not header.tensors:
        raise BadGguf(f"{where} holds no tensors (a vocabulary-only GGUF?)")
    tokenizer = str(header.fields.get("tokenizer.ggml.model") or "")
    if tokenizer not in _TOKENIZERS:
        raise ArtifactError(
            f"{where}: tokenizer kind {tokenizer or '(none)'!r} is not supported (gpt2: byte-level BPE; llama: "
            f"SentencePiece)"
        )
    pre = str(header.fields.get("tokenizer.ggml.pre") or "default")
    if tokenizer == "gpt2" and pre not in PRE_TOKENIZERS:
        raise ArtifactError(
            f"{where}: pre-tokenizer {pre!r} (tokenizer.ggml.pre) is not supported; supported are "
            f"{', '.join(PRE_TOKENIZERS)}"
        )


def sha256(path: Path) -> str:
    """The file's sha256 (hex); computed once per process for an unchanged file (same size, mtime and inode)."""
    stat = path.stat()
    key = (str(path), stat.st_size, stat.st_mtime_ns, stat.st_ino)
    if key not in _digests:
        digest = hashlib.sha256()
        with path.open("rb") as file:
            while chunk := file.read(1 << 22):
                digest.update(chunk)
        _digests[key] = digest.hexdigest()
    return _digests[key]
