"""The model catalogue: built-in models converted to ONNX once and cached, local ONNX
directories, and the resolution of manifest ``source`` strings.

Runtime code needs only onnxruntime and tokenizers to import this package; torch,
transformers, optimum and gguf are imported by the builders when a model is built.

Typical use by a worker::

    source = resolve_source(model.source, base_dir=manifest_dir)   # pure
    if isinstance(source, RemoteSource):
        ...                                                          # nothing to prepare
    else:
        artifact = ensure_artifact(source)                           # builds once, then cached
        artifact.model_path, artifact.tokenizer_path, artifact.record.past_inputs, ...
"""

from nrt.catalogue.artifacts import (
    ArtifactStatus,
    PreparedArtifact,
    ensure_artifact,
    find_prepared,
    prepare,
    prepare_local,
    prepare_steps,
    status,
)
from nrt.catalogue.catalogue import CATALOGUE, UnknownModelError, catalogue_names, get_entry
from nrt.catalogue.entry import BuildContext, CatalogueEntry
from nrt.catalogue.layout import artifact_dir
from nrt.catalogue.progress import NoProgress, Progress, StepLog
from nrt.catalogue.record import (
    FORMAT_VERSION,
    ArtifactRecord,
    FileEntry,
    RecordError,
    Verification,
    load_record,
    save_record,
    verify,
)
from nrt.catalogue.sources import (
    ANTHROPIC_BASE_URL,
    ANTHROPIC_KEY_ENV,
    AnthropicSource,
    CatalogueSource,
    LocalSource,
    RemoteSource,
    ResolvedSource,
    SourceError,
    resolve_source,
)
from nrt.inference.artifact import CONFIG_FILE, MODEL_FILE, RECORD_FILE, TOKENIZER_FILE
from nrt.inference.errors import ArtifactError  # one error for an unusable artifact, at build and at load

__all__ = [
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_KEY_ENV",
    "CATALOGUE",
    "CONFIG_FILE",
    "FORMAT_VERSION",
    "MODEL_FILE",
    "RECORD_FILE",
    "TOKENIZER_FILE",
    "AnthropicSource",
    "ArtifactError",
    "ArtifactRecord",
    "ArtifactStatus",
    "BuildContext",
    "CatalogueEntry",
    "CatalogueSource",
    "FileEntry",
    "LocalSource",
    "NoProgress",
    "PreparedArtifact",
    "Progress",
    "RecordError",
    "RemoteSource",
    "ResolvedSource",
    "SourceError",
    "StepLog",
    "UnknownModelError",
    "Verification",
    "artifact_dir",
    "catalogue_names",
    "ensure_artifact",
    "find_prepared",
    "get_entry",
    "load_record",
    "prepare",
    "prepare_local",
    "prepare_steps",
    "resolve_source",
    "save_record",
    "status",
    "verify",
]
