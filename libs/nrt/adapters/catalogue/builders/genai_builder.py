"""Run onnxruntime-genai's model builder (``onnxruntime_genai.models.builder``) with this project's transformers.

``python -m nrt.adapters.catalogue.builders.genai_builder <builder arguments>``, in a child process
(:func:`nrt.adapters.catalogue.builders.fused.build_fused`). The builder imports a few
transformers classes of newer releases (multimodal models it does not build here): they are
stood in for by empty classes. It reads RoPE settings from transformers 5's
``config.rope_parameters`` (``rope_type``, ``rope_theta`` and the scaling's own keys); transformers
4.x keeps them in ``rope_scaling`` (``None`` for plain RoPE) and ``rope_theta``: they are copied over.

The builder is pure Python; the package around it (``onnxruntime_genai``) loads a native library
built against the ``onnxruntime`` distribution, which a GPU host does not have (``onnxruntime-gpu``
installs the same module). So the package is installed without its dependencies
(``scripts/bootstrap``) and stood in for by a namespace that only locates its files
(:func:`package_without_native_library`): the builder never loads the native part.
"""

from __future__ import annotations

import importlib.util
import os
import runpy
import sys
import types
from importlib import metadata
from typing import Any

PACKAGE = "onnxruntime_genai"

_IMPORTED = (  # what the builder imports from transformers at module level
    "AutoConfig",
    "AutoModelForCausalLM",
    "AutoModelForSpeechSeq2Seq",
    "AutoTokenizer",
    "GenerationConfig",
    "Qwen2ForCausalLM",
    "Gemma3ForConditionalGeneration",
    "Lfm2VlForConditionalGeneration",
    "Mistral3ForConditionalGeneration",
    "Qwen2_5_VLForConditionalGeneration",
    "Qwen3_5ForConditionalGeneration",
    "Qwen3_5MoeForConditionalGeneration",
    "Qwen3VLForConditionalGeneration",
)


def stand_in_missing_classes() -> list[str]:
    """Give transformers an empty class for each name the builder imports and this release lacks."""
    import transformers  # noqa: F401  (resolving a lazy name can replace the module: look it up afterwards)

    missing = []
    for name in _IMPORTED:
        try:
            getattr(sys.modules["transformers"], name)
        except (AttributeError, ImportError):
            missing.append(name)
    for name in missing:
        sys.modules["transformers"].__dict__[name] = type(name, (), {})
    return missing


def package_without_native_library() -> None:
    """Register ``onnxruntime_genai`` as a bare package (its files, its version) without running its
    ``__init__``, which loads the native runtime."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"{PACKAGE} is not installed")
    package = types.ModuleType(PACKAGE)
    package.__path__ = list(spec.submodule_search_locations)
    package.__version__ = metadata.version("onnxruntime-genai")  # type: ignore[attr-defined]
    package.__commit__ = None  # type: ignore[attr-defined]
    sys.modules[PACKAGE] = package


def tolerate_transformers_4_rope() -> None:
    import onnxruntime_genai.models as models

    sys.path.insert(0, os.path.dirname(models.__file__))  # the builder imports its siblings as top-level modules
    import builders.base as base  # type: ignore[import-not-found]

    original = base.Model.make_config_init

    def make_config_init(self: Any, config: Any) -> Any:
        if not isinstance(getattr(config, "rope_parameters", None), dict) and hasattr(config, "rope_scaling"):
            scaling = dict(config.rope_scaling or {})
            kind = scaling.pop("rope_type", scaling.pop("type", "default"))
            parameters = {"rope_type": kind, **scaling}
            if getattr(config, "rope_theta", None) is not None:
                parameters["rope_theta"] = config.rope_theta
            config.rope_parameters = parameters
            config.rope_scaling = {}
        return original(self, config)

    base.Model.make_config_init = make_config_init


def main() -> None:
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    package_without_native_library()
    stand_in_missing_classes()
    tolerate_transformers_4_rope()
    sys.argv = ["onnxruntime_genai.models.builder", *sys.argv[1:]]
    runpy.run_module("onnxruntime_genai.models.builder", run_name="__main__")


if __name__ == "__main__":
    main()
