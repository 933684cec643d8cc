"""NRT inference engine: ONNX Runtime models, tiers, batching, sessions, templates.

Pure library code (no NATS): the specialist worker wraps it. Runtime dependencies are
onnxruntime, tokenizers, numpy and msgspec only.
"""

from nrt.inference.artifact import ArtifactRecord, CausalSpec, GraphSignature
from nrt.inference.bare import bare_greedy
from nrt.inference.batching import BatcherStats, BatchingGenerator
from nrt.inference.causal import CausalLM
from nrt.inference.detokenize import IncrementalDetokenizer
from nrt.inference.encoder import Encoder
from nrt.inference.errors import (
    ArtifactError,
    ContextWindowError,
    GeneratorClosedError,
    InferenceError,
    TemplateError,
)
from nrt.inference.registry import ArtifactRegistry, ArtifactUsage, Tier, TierChange
from nrt.inference.sessions import SessionStore, SessionUsage
from nrt.inference.stops import StopMatcher
from nrt.inference.structs import Chunk, FinishReason, GenerationRequest, Timings, Usage
from nrt.inference.templates import (
    BUILTIN_TEMPLATES,
    ChatMessage,
    PromptTemplate,
    builtin_template,
    few_shot,
)
from nrt.inference.weights import (
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
    "GraphSignature",
    "IncrementalDetokenizer",
    "InferenceError",
    "PromptTemplate",
    "SessionStore",
    "SessionUsage",
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
