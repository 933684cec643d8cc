"""The operator's own models: a Hugging Face checkpoint (``hf://``, a local directory, or a GGUF file
de-quantised into one) as a catalogue entry.

A checkpoint (``config.json``, ``*.safetensors``, the tokenizer) of a supported architecture is
prepared like a built-in model (:func:`nrt.adapters.catalogue.artifacts.prepare`): exported to ONNX
with optimum (decoders with past key values, encoders for feature extraction), checked against
the PyTorch model on the same input, and installed under ``models_dir()/<name>`` with its record.

Preparation is content-addressed: the artifact's name is derived from the source and the commit
(``hf://``), the checkpoint's files (a local directory) or the file's sha256 (a GGUF file), so each (source, revision) is prepared
once per host, whichever worker asks first; the catalogue's build lock makes two workers that ask
at once build it once. Variants: ``cpu`` with int8 weights (blockwise, per-row activations: the
catalogue's quantiser), ``cuda`` with float16 weights.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import msgspec
import numpy as np
import numpy.typing as npt

from nrt.adapters.catalogue.entry import BuildContext, CatalogueEntry, Variant
from nrt.adapters.catalogue.hub import Checkout
from nrt.adapters.catalogue.record import ArtifactRecord, Kind, Provider, Quantization
from nrt.adapters.inference.artifact import CONFIG_FILE, MODEL_FILE, TOKENIZER_FILE
from nrt.adapters.inference.errors import ArtifactError
from nrt.core.vocabulary import WeightFormat

RECIPE = "checkpoint/1"
CUDA_RECIPE = f"{RECIPE}+fp16/1"
# the cpu variant of each weight format (fp16 is the cuda variant's, over the default int8 root)
CpuFormat = Literal["int4", "int8", "none", "fused-int4", "fused-int8", "fused-fp32"]
CPU_FORMATS: dict[CpuFormat, tuple[Quantization, str]] = {
    "int8": ("int8-dynamic", f"{RECIPE}+int8/1"),
    "int4": ("int4", f"{RECIPE}+int4/2"),  # 2: integer zero points, fitted; v, o, down at 8 bits
    "none": ("fp32", f"{RECIPE}+fp32/1"),
    # fused graphs (builders/fused.py: onnxruntime-genai's model builder), NRT_FUSED_GRAPHS=1; an
    # architecture the builder lacks falls back to the optimum export of the format in FUSED_FALLBACK
    # fused-int8 2: a GGUF's own blocks; fused-int4 2: blocks of 16; both 3: an integer LM head; 4: its two-row activations
    "fused-int8": ("int8-dynamic", f"{RECIPE}+fused-int8/4"),
    "fused-int4": ("int4", f"{RECIPE}+fused-int4/4"),
    "fused-fp32": ("fp32", f"{RECIPE}+fused-fp32/1"),
}
FUSED_FALLBACK: dict[CpuFormat, CpuFormat] = {"fused-int8": "int8", "fused-int4": "int4", "fused-fp32": "none"}
FUSED_OF: dict[CpuFormat, CpuFormat] = {plain: fused for fused, plain in FUSED_FALLBACK.items()}
FUSED_PRECISION: dict[CpuFormat, Literal["int4", "int8", "fp32"]] = {
    "fused-int8": "int8",
    "fused-int4": "int4",
    "fused-fp32": "fp32",
}

# model_type (config.json) -> what it is; optimum exports each with the task below
DECODERS = (
    "llama",
    "mistral",
    "qwen2",
    "qwen3",
    "phi3",
    "gemma",
    "gemma2",
    "gemma3_text",
    "granite",
    "smollm3",
)
ENCODERS = ("bert", "roberta", "distilbert", "xlm-roberta", "mpnet")
# the files of a checkpoint that travel into the artifact beside the graph
COMPANIONS = (
    TOKENIZER_FILE,
    "tokenizer_config.json",
    "special_tokens_map.json",
    "generation_config.json",
    "chat_template.jinja",
    "modules.json",  # a sentence-transformers encoder: whether it normalises
    "sentence_bert_config.json",  # and its sequence length
)
STEPS = ("Read the checkpoint", "Load the weights", "Export to ONNX")
GGUF_STEPS = ("De-quantise the GGUF into a Hugging Face checkpoint",)  # before STEPS, for a GGUF file
CPU_STEPS = ("Quantise the weights", "Check the quantised model against torch")
CUDA_STEPS = ("Convert to float16 weights (CUDA variant)", "Check float16 against torch")
PROMPT = "The quick brown fox jumps over the lazy dog."
# the largest |logit difference| a variant may show against torch, relative to 1 + the largest |logit|
TOLERANCE: dict[Quantization, float] = {"fp32": 1e-3, "int8-dynamic": 0.25, "int4": 0.6, "fp16": 0.05}
_SLUG = re.compile(r"[^a-z0-9]+")
USER_PREFIX = "user-"  # the names of operators' models under models_dir() (catalogue names never start so)
LABEL_FILE = "label"  # in a user model's directory: the name its operator gave it (`nrt models add --id`)
_LABEL = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")


class UnsupportedArchitecture(ArtifactError):
    """A checkpoint whose architecture NRT cannot export (the message lists the supported ones)."""


@dataclass(frozen=True)
class Checkpoint:
    """A Hugging Face checkpoint directory, what it is, and what it is called once prepared."""

    directory: Path  # a GGUF file's: the folder it is in (its checkpoint is written at build time)
    # the record's ``source``: hf://org/name@<commit>, local:/abs/dir#<fingerprint> or gguf:/abs/x.gguf#<sha256>
    provenance: str
    name: str  # the artifact's name under models_dir(): derived from the provenance
    model_type: str
    kind: Kind
    weight_bytes: int
    cpu_format: CpuFormat = "int8"  # how the cpu variant stores the weights (a decoder's; encoders stay fp32)
    gguf: Path | None = None  # a GGUF file: de-quantised into a checkpoint in the build's scratch directory first


@dataclass(frozen=True)
class UserModel:
    """An operator's model prepared on this host: its directory and the record of each variant built."""

    name: str
    directory: Path
    variants: tuple[ArtifactRecord, ...]  # the root (cpu) variant first, when built
    label: str | None = None  # the name its operator gave it, if any

    @property
    def source(self) -> str:
        return self.variants[0].source if self.variants else "?"

    @property
    def total_bytes(self) -> int:
        return sum(record.total_bytes for record in self.variants)


def user_models() -> list[UserModel]:
    """The operators' models prepared under ``models_dir()``, by name."""
    from nrt.adapters import settings
    from nrt.adapters.catalogue.record import RecordError, load_record
    from nrt.adapters.catalogue.variants import PROVIDERS, variant_path

    root = settings.models_dir()
    found = []
    for directory in sorted(root.glob(f"{USER_PREFIX}*")) if root.is_dir() else []:
        if not directory.is_dir():
            continue
        records = []
        for provider in PROVIDERS:
            with contextlib.suppress(RecordError):
                records.append(load_record(variant_path(directory, provider)))
        label_file = directory / LABEL_FILE
        label = label_file.read_text().strip() if label_file.is_file() else None
        found.append(UserModel(directory.name, directory, tuple(records), label or None))
    return found


def user_model(name: str) -> UserModel | None:
    """The operator's model called ``name`` here: its content-addressed name, or the label it was given."""
    return next((model for model in user_models() if name in (model.name, model.label)), None)


def label_user_model(name: str, label: str) -> None:
    """Give the operator's model ``name`` the label ``label`` (unique on this host: another model's is an error)."""
    if not _LABEL.match(label) or label.startswith(USER_PREFIX):
        raise ArtifactError(
            f"--id {label!r}: expected lower-case letters, digits and . _ - (at most 64, not starting with "
            f"{USER_PREFIX!r})"
        )
    taken = next((model for model in user_models() if model.label == label and model.name != name), None)
    if taken is not None:
        raise ArtifactError(f"--id {label!r} already names {taken.name} ({taken.source}); choose another")
    from nrt.adapters.catalogue.layout import artifact_dir

    (artifact_dir(name) / LABEL_FILE).write_text(label + "\n")


def remove_user_model(name: str) -> Path:
    """Delete the operator's model ``name`` (its every variant), under its build lock; its directory."""
    from nrt.adapters.catalogue.layout import artifact_dir, build_lock

    found = user_model(name)
    name = found.name if found is not None else name
    if not name.startswith(USER_PREFIX) or "/" in name:
        raise ArtifactError(
            f"{name!r} is not an operator's model (their names start with {USER_PREFIX}, or are the --id they were "
            f"given)"
        )
    directory = artifact_dir(name)
    if not directory.is_dir():
        raise ArtifactError(f"no operator's model {name!r} is prepared here ({directory})")
    with build_lock(name):
        shutil.rmtree(directory)
    return directory


def supported() -> str:
    return f"decoders: {', '.join(DECODERS)}; encoders: {', '.join(ENCODERS)}"


def is_checkpoint(directory: Path) -> bool:
    """Whether ``directory`` looks like a Hugging Face checkpoint (a config and safetensors weights)."""
    return (directory / CONFIG_FILE).is_file() and any(directory.glob("*.safetensors"))


def graph_path(record: ArtifactRecord | None) -> str:
    """How a variant's graph was built, for ``nrt models info``: ``fused`` (the model builder's
    GroupQueryAttention graph), ``optimum`` (the export, op by op), or ``-`` when not built."""
    if record is None:
        return "-"
    from nrt.adapters.catalogue.builders.fused import DETAIL_PREFIX

    return "fused" if (record.quantization_detail or "").startswith(DETAIL_PREFIX) else "optimum"


def cpu_format(weights: WeightFormat | None, fused: bool | None = None) -> CpuFormat:
    """The cpu variant a manifest's ``quantization`` asks for (fp16 is served by the cuda variant,
    built over the default int8 cpu one); with ``fused`` (default: ``NRT_FUSED_GRAPHS``), its fused graph."""
    if fused is None:
        from nrt.adapters.settings import fused_graphs

        fused = fused_graphs()
    fmt: CpuFormat = "int8"
    if weights is WeightFormat.INT4:
        fmt = "int4"
    elif weights is WeightFormat.NONE:
        fmt = "none"
    if not fused:
        return fmt
    return FUSED_OF[fmt]


def read_checkpoint(directory: Path, provenance: str, fmt: CpuFormat = "int8") -> Checkpoint:
    """What the checkpoint in ``directory`` is; :class:`UnsupportedArchitecture` or ``ArtifactError`` when unusable."""
    config_path = directory / CONFIG_FILE
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ArtifactError(f"{provenance}: {CONFIG_FILE} cannot be read ({exc})") from None
    model_type = str(config.get("model_type") or "")
    if model_type in DECODERS:
        kind: Kind = "causal-lm"
    elif model_type in ENCODERS:
        kind = "encoder"
    else:
        architectures = ", ".join(config.get("architectures") or []) or "no architectures listed"
        raise UnsupportedArchitecture(
            f"{provenance}: model_type {model_type or '(none)'!r} ({architectures}) is not supported; "
            f"supported are {supported()}"
        )
    weights = sorted(directory.glob("*.safetensors"))
    if not weights:
        raise ArtifactError(f"{provenance}: no *.safetensors weights in {directory}")
    if not (directory / TOKENIZER_FILE).is_file():
        raise ArtifactError(
            f"{provenance}: no {TOKENIZER_FILE} in {directory} (NRT reads fast tokenizers: save the tokenizer "
            f"with transformers' save_pretrained, which writes it)"
        )
    fmt = fmt if kind == "causal-lm" else "none"
    return Checkpoint(
        directory=directory,
        provenance=provenance,
        name=artifact_name(provenance if fmt == "int8" else f"{provenance}+{fmt}"),
        model_type=model_type,
        kind=kind,
        weight_bytes=sum(path.stat().st_size for path in weights),
        cpu_format=fmt,
    )


def artifact_name(provenance: str) -> str:
    """A catalogue-style name (lowercase letters, digits, dashes) unique to ``provenance``: a readable
    slug of it and a hash of the whole, so two sources never share an artifact."""
    base = provenance.split("@")[0].split("#")[0]
    if base.startswith("local:"):  # a directory: its own name, not the whole path
        base = "local-" + Path(base.removeprefix("local:")).name
    elif base.startswith("gguf:"):  # a GGUF file: its name without the suffix
        base = "gguf-" + Path(base.removeprefix("gguf:")).stem
    readable = _SLUG.sub("-", base.lower()).strip("-")[:48].strip("-")
    digest = hashlib.sha256(provenance.encode()).hexdigest()[:12]
    return f"{USER_PREFIX}{readable}-{digest}"


def fingerprint(directory: Path) -> str:
    """A local checkpoint's revision: the sha256 of its files' names, sizes and modification times
    (cheap for a multi-gigabyte checkpoint; any rewrite of a file changes it)."""
    digest = hashlib.sha256()
    for path in sorted(p for p in directory.iterdir() if p.is_file()):
        stat = path.stat()
        digest.update(f"{path.name}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def local_checkpoint(directory: Path, fmt: CpuFormat = "int8") -> Checkpoint:
    """The checkpoint in a local directory, named after the directory and its fingerprint."""
    resolved = directory.expanduser().resolve()
    return read_checkpoint(resolved, f"local:{resolved}#{fingerprint(resolved)[:16]}", fmt)


def hub_checkpoint(checkout: Checkout, fmt: CpuFormat = "int8") -> Checkpoint:
    """The checkpoint an ``hf://`` source fetched into the Hugging Face cache, named after its commit."""
    return read_checkpoint(checkout.directory, checkout.pinned, fmt)


def checkpoint_entry(checkpoint: Checkpoint) -> CatalogueEntry:
    """The catalogue entry that prepares ``checkpoint``: its variants and its builder."""
    approx = checkpoint.weight_bytes
    quantization, recipe = CPU_FORMATS[checkpoint.cpu_format]
    plain = FUSED_FALLBACK.get(checkpoint.cpu_format, checkpoint.cpu_format)
    cpu_bytes = {"int8": approx // 4, "int4": approx // 7}.get(plain, approx)
    return CatalogueEntry(
        name=checkpoint.name,
        kind=checkpoint.kind,
        description=f"{checkpoint.model_type} {'GGUF' if checkpoint.gguf else 'checkpoint'} {checkpoint.provenance}",
        steps=(*GGUF_STEPS, *STEPS) if checkpoint.gguf else STEPS,
        variants=(
            Variant(provider="cpu", quantization=quantization, recipe=recipe, steps=CPU_STEPS, approx_bytes=cpu_bytes),
            Variant(
                provider="cuda", quantization="fp16", recipe=CUDA_RECIPE, steps=CUDA_STEPS, approx_bytes=approx // 2
            ),
        ),
        build=lambda context: build(checkpoint, context),
    )


def build(checkpoint: Checkpoint, context: BuildContext) -> tuple[ArtifactRecord, ...]:
    from nrt.adapters.catalogue.builders.export import (
        copy_model,
        export_causal_lm,
        export_feature_extraction,
        offline,
        quiet,
        untyped,
    )
    from nrt.adapters.catalogue.builders.fp16 import write_cuda_variant
    from nrt.adapters.catalogue.builders.logits import add_logits_to_keep
    from nrt.adapters.catalogue.builders.quantize import quantize_blockwise

    gguf = checkpoint.gguf  # a fused int8 graph takes the GGUF's own blocks (builders/gguf_weights.py)
    if checkpoint.gguf is not None:
        from nrt.adapters.catalogue.builders.gguf_checkpoint import write_checkpoint

        context.progress.step(GGUF_STEPS[0])
        directory = write_checkpoint(checkpoint.gguf, context.work / "checkpoint")
        checkpoint = dataclasses.replace(checkpoint, directory=directory, gguf=None)
    context.progress.step(STEPS[0])
    offline()
    import torch

    transformers = untyped("transformers")
    tokenizer = untyped("tokenizers").Tokenizer.from_file(str(checkpoint.directory / TOKENIZER_FILE))
    prompt = tokenizer.encode(PROMPT).ids or [0]

    context.progress.step(STEPS[1])
    auto = transformers.AutoModelForCausalLM if checkpoint.kind == "causal-lm" else transformers.AutoModel
    with quiet():
        model = auto.from_pretrained(
            str(checkpoint.directory), local_files_only=True, torch_dtype=torch.float32, trust_remote_code=False
        ).eval()
    with torch.no_grad():
        ids = torch.tensor([prompt])
        output = model(input_ids=ids, attention_mask=torch.ones_like(ids))
        expected = (output.logits if checkpoint.kind == "causal-lm" else output.last_hidden_state)[0].numpy()

    context.progress.step(STEPS[2])
    fused_reason: str | None = None  # why a fused format fell back to the optimum export
    fused_record: ArtifactRecord | None = None  # the fused cpu variant, built and checked
    if checkpoint.cpu_format in FUSED_FALLBACK and "cpu" in context.providers:
        try:
            fused_record = _fused_variant(checkpoint, context.directory("cpu"), gguf, context.work, prompt, expected)
        except ArtifactError as exc:  # an unsupported architecture, or the builder failed on it
            fused_reason = str(exc)
    export = context.work / "export"
    if fused_record is None or any(p != "cpu" for p in context.providers):
        if checkpoint.kind == "causal-lm":
            export = export_causal_lm(model, context.work, add_position_ids=not _exports_position_ids(model))
        else:
            export = export_feature_extraction(model, context.work)
    del model

    records: list[ArtifactRecord] = []
    for provider in context.providers:
        target = context.directory(provider)
        quantization: Quantization
        if provider == "cpu" and fused_record is not None:  # built, its companions copied, checked
            context.progress.step(CPU_STEPS[0])
            context.progress.step(CPU_STEPS[1])
            records.append(fused_record)
            continue
        if provider == "cpu":
            context.progress.step(CPU_STEPS[0])
            quantization, recipe = CPU_FORMATS[checkpoint.cpu_format]
            plain = FUSED_FALLBACK.get(checkpoint.cpu_format, checkpoint.cpu_format)
            if fused_reason is not None:  # the optimum export of the same weight format (the recipe stays)
                quantization = CPU_FORMATS[plain][0]
            if plain in ("int8", "int4"):
                bits: Literal[4, 8] = 4 if plain == "int4" else 8
                report = quantize_blockwise(export / MODEL_FILE, target / MODEL_FILE, bits=bits)
                detail = report.scheme
            else:  # the checkpoint's own weights (an encoder always: small, and its embeddings exact)
                copy_model(export, target)
                detail = "fp32: the checkpoint's weights, unquantised"
            if checkpoint.kind == "causal-lm":
                add_logits_to_keep(target / MODEL_FILE)
            if fused_reason is not None:
                detail = f"optimum export, not fused ({fused_reason}): {detail}"
            context.progress.step(CPU_STEPS[1])
        else:
            context.progress.step(CUDA_STEPS[0])
            write_cuda_variant(export, target)
            quantization, detail, recipe = "fp16", "float16 weight matrices", CUDA_RECIPE
            context.progress.step(CUDA_STEPS[1])
        _companions(checkpoint.directory, export, target)
        record = _record(checkpoint, target, provider, recipe, quantization, detail)
        _check(checkpoint, target, record, prompt, expected)
        records.append(record)
    return tuple(records)


def _fused_variant(
    checkpoint: Checkpoint, target: Path, gguf: Path | None, work: Path, prompt: list[int], expected: npt.NDArray[Any]
) -> ArtifactRecord:
    """Build the fused graph of ``checkpoint`` in ``target`` (with its companions) and check it against
    PyTorch; its record. ``ArtifactError`` (the reason to fall back) when the builder lacks the
    architecture, fails on it, or its graph fails the check."""
    from nrt.adapters.catalogue.builders import fused

    reason = fused.unsupported(checkpoint.directory)
    if reason is not None:
        raise ArtifactError(reason)
    precision = FUSED_PRECISION[checkpoint.cpu_format]
    fused.build_fused(checkpoint.directory, target, precision, work)
    detail = _gguf_blocks(target, gguf) if gguf is not None and precision == "int8" else fused.detail(precision)
    detail = fused.with_integer_head(target, detail)
    _companions(checkpoint.directory, work / "export", target)  # no export made yet: the checkpoint's config
    quantization, recipe = CPU_FORMATS[checkpoint.cpu_format]
    record = _record(checkpoint, target, "cpu", recipe, quantization, detail)
    _check(checkpoint, target, record, prompt, expected)
    return record


def _gguf_blocks(target: Path, gguf: Path) -> str:
    """Give the fused graph in ``target`` the GGUF's own weight blocks (builders/gguf_weights.py); its
    ``quantization_detail``. A GGUF whose blocks do not fit keeps the builder's weights, and the detail says why."""
    from nrt.adapters.catalogue.builders import fused
    from nrt.adapters.catalogue.builders.gguf_checkpoint import row_order
    from nrt.adapters.catalogue.builders.gguf_weights import transcode

    try:
        return fused.detail("int8", transcode(target / MODEL_FILE, gguf, row_order(gguf)).describe())
    except ArtifactError as exc:
        return f"{fused.detail('int8')}; not the GGUF's own blocks: {exc}"


def _exports_position_ids(model: Any) -> bool:
    """Whether optimum's export config for ``model`` takes ``position_ids`` (some omit it: then it is added)."""
    import optimum.exporters.onnx.model_configs  # noqa: F401  (registers the ONNX export configs)
    from optimum.exporters.tasks import TasksManager

    constructor = TasksManager.get_exporter_config_constructor(
        exporter="onnx", model=model, task="text-generation-with-past", library_name="transformers"
    ).func
    config = constructor(model.config, task="text-generation", use_past=True, use_past_in_inputs=True)
    return "position_ids" in config.inputs


def _companions(checkpoint: Path, export: Path, target: Path) -> None:
    """config.json (the export's, or the checkpoint's for a fused graph, built without one) and the companions."""
    config = export / CONFIG_FILE if (export / CONFIG_FILE).is_file() else checkpoint / CONFIG_FILE
    shutil.copyfile(config, target / CONFIG_FILE)
    for name in COMPANIONS:
        if (checkpoint / name).is_file():
            shutil.copyfile(checkpoint / name, target / name)


def _record(
    checkpoint: Checkpoint, target: Path, provider: Provider, recipe: str, quantization: Quantization, detail: str
) -> ArtifactRecord:
    from nrt.adapters.catalogue.local import describe_local

    described = describe_local(target)
    return msgspec.structs.replace(
        described,
        name=checkpoint.name,
        source=checkpoint.provenance,
        recipe=recipe,
        provider=provider,
        quantization=quantization,
        quantization_detail=detail,
    )


def _check(
    checkpoint: Checkpoint, target: Path, record: ArtifactRecord, prompt: list[int], expected: npt.NDArray[Any]
) -> None:
    """The variant's output on the prompt against PyTorch's, within its quantisation's tolerance."""
    from nrt.adapters.catalogue.builders.fp16 import logit_error

    got = variant_output(target, record, prompt)
    if not np.isfinite(got).all():
        raise ArtifactError(f"{checkpoint.provenance}: the {record.provider} variant gives non-finite outputs")
    error = logit_error(expected, got)
    limit = TOLERANCE.get(record.quantization or "unknown", TOLERANCE["int8-dynamic"])
    if error > limit:
        raise ArtifactError(
            f"{checkpoint.provenance}: the {record.provider} variant ({record.quantization}) differs from PyTorch "
            f"by {error:.4f} of the output's scale (> {limit})"
        )


def variant_output(directory: Path, record: ArtifactRecord, prompt: list[int]) -> npt.NDArray[Any]:
    """The graph's logits (a decoder) or last hidden state (an encoder) for ``prompt``, one row per token."""
    from nrt.adapters.catalogue.greedy import empty_past, forward, open_session

    session = open_session(directory, record)
    ids = np.array([prompt], dtype=np.int64)
    if record.kind == "causal-lm":
        logits, _ = forward(session, record, ids, empty_past(record))
        first: npt.NDArray[Any] = logits[0]
        return first
    names = {value.name for value in session.get_inputs()}
    feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
    if "token_type_ids" in names:
        feeds["token_type_ids"] = np.zeros_like(ids)
    hidden: npt.NDArray[Any] = session.run(None, {k: v for k, v in feeds.items() if k in names})[0][0]
    return hidden
