"""NRT inference engine: ONNX Runtime models, tiers, batching, sessions, templates.

Pure library code (no NATS): the specialist worker wraps it. Runtime dependencies are
onnxruntime, tokenizers, numpy and msgspec only.
"""

from nrt.adapters.inference.artifact import ArtifactRecord, CausalSpec, GraphSignature
from nrt.adapters.inference.bare import bare_greedy
from nrt.adapters.inference.batching import BatcherStats, BatchingGenerator
from nrt.adapters.inference.causal import CausalLM
from nrt.adapters.inference.detokenize import IncrementalDetokenizer
from nrt.adapters.inference.encoder import Encoder
from nrt.adapters.inference.errors import (
    ArtifactError,
    ContextWindowError,
    GeneratorClosedError,
    GrammarError,
    InferenceError,
    LogitBiasError,
    TemplateError,
)
from nrt.adapters.inference.registry import ArtifactRegistry, ArtifactUsage, Tier, TierChange
from nrt.adapters.inference.sessions import SessionStore, SessionUsage
from nrt.adapters.inference.stops import StopMatcher
from nrt.adapters.inference.structs import Chunk, FinishReason, GenerationRequest, Timings, Usage
from nrt.adapters.inference.templates import (
    BUILTIN_TEMPLATES,
    ChatMessage,
    PromptTemplate,
    builtin_template,
    few_shot,
)
from nrt.adapters.inference.weights import (
    Spin,
    Weights,
    active_provider,
    build_session,
    load_weights,
    select_providers,
)

__all__ = [
    "BUILTIN_TEMPLATES",
    "ArtifactError",
    "ArtifactRecord",
    "ArtifactRegistry",
    "ArtifactUsage",
    "BatcherStats",
    "BatchingGenerator",
    "CausalLM",
    "CausalSpec",
    "ChatMessage",
    "Chunk",
    "ContextWindowError",
    "Encoder",
    "FinishReason",
    "GenerationRequest",
    "GeneratorClosedError",
    "GrammarError",
    "GraphSignature",
    "IncrementalDetokenizer",
    "InferenceError",
    "LogitBiasError",
    "PromptTemplate",
    "SessionStore",
    "SessionUsage",
    "Spin",
    "StopMatcher",
    "TemplateError",
    "Tier",
    "TierChange",
    "Timings",
    "Usage",
    "Weights",
    "active_provider",
    "bare_greedy",
    "build_session",
    "builtin_template",
    "few_shot",
    "load_weights",
    "select_providers",
]
