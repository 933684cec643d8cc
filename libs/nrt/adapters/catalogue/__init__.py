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
        served = find_serving(source.name, host_provider())           # the cuda/ variant on a GPU
"""

from nrt.adapters.catalogue.artifacts import (
    ArtifactStatus,
    PreparedArtifact,
    ensure_artifact,
    find_prepared,
    find_serving,
    prepare,
    prepare_local,
    prepare_steps,
    status,
    statuses,
)
from nrt.adapters.catalogue.catalogue import CATALOGUE, UnknownModelError, catalogue_names, get_entry
from nrt.adapters.catalogue.entry import BuildContext, CatalogueEntry, Variant
from nrt.adapters.catalogue.layout import artifact_dir
from nrt.adapters.catalogue.locate import LocatedArtifact, NotAnExport, NotPrepared, PreparedModel, locate
from nrt.adapters.catalogue.progress import NoProgress, Progress, StepLog
from nrt.adapters.catalogue.record import (
    FORMAT_VERSION,
    ArtifactRecord,
    FileEntry,
    Provider,
    RecordError,
    Verification,
    load_record,
    save_record,
    verify,
)
from nrt.adapters.catalogue.sources import (
    ANTHROPIC_BASE_URL,
    ANTHROPIC_KEY_ENV,
    HF_INFERENCE_URL,
    HF_TOKEN_ENV,
    AnthropicSource,
    CatalogueSource,
    GgufSource,
    HubEndpoint,
    LocalSource,
    RemoteSource,
    ResolvedSource,
    SourceError,
    resolve_source,
)
from nrt.adapters.catalogue.variants import (
    PROVIDERS,
    ROOT_PROVIDER,
    default_providers,
    host_provider,
    parse_provider,
    provider_for,
    serving_directory,
    variant_path,
)
from nrt.adapters.inference.artifact import CONFIG_FILE, MODEL_FILE, RECORD_FILE, TOKENIZER_FILE
from nrt.adapters.inference.errors import ArtifactError  # one error for an unusable artifact, at build and at load

__all__ = [
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_KEY_ENV",
    "CATALOGUE",
    "CONFIG_FILE",
    "FORMAT_VERSION",
    "HF_INFERENCE_URL",
    "HF_TOKEN_ENV",
    "MODEL_FILE",
    "PROVIDERS",
    "RECORD_FILE",
    "ROOT_PROVIDER",
    "TOKENIZER_FILE",
    "AnthropicSource",
    "ArtifactError",
    "ArtifactRecord",
    "ArtifactStatus",
    "BuildContext",
    "CatalogueEntry",
    "CatalogueSource",
    "FileEntry",
    "GgufSource",
    "HubEndpoint",
    "LocalSource",
    "LocatedArtifact",
    "NoProgress",
    "NotAnExport",
    "NotPrepared",
    "PreparedArtifact",
    "PreparedModel",
    "Progress",
    "Provider",
    "RecordError",
    "RemoteSource",
    "ResolvedSource",
    "SourceError",
    "StepLog",
    "UnknownModelError",
    "Variant",
    "Verification",
    "artifact_dir",
    "catalogue_names",
    "default_providers",
    "ensure_artifact",
    "find_prepared",
    "find_serving",
    "get_entry",
    "host_provider",
    "load_record",
    "locate",
    "parse_provider",
    "prepare",
    "prepare_local",
    "prepare_steps",
    "provider_for",
    "resolve_source",
    "save_record",
    "serving_directory",
    "status",
    "statuses",
    "variant_path",
    "verify",
]
