"""Variants of one artifact, one per execution provider, and which one a process serves.

An artifact directory holds the ``cpu`` variant at its root: the graph every host can run
(int8 for Gemma, fp32 for the small models). A variant built for another provider lives in
a subdirectory named after it (``cuda/``: fp16 weights and key/values for a GPU). Each
variant directory is a complete artifact (``model.onnx``, ``tokenizer.json``,
``config.json``, ``nrt-artifact.json`` naming its ``provider``), so whatever loads an
artifact directory loads a variant directory unchanged. An artifact without a ``cuda/``
variant is served on CUDA from its root.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import get_args

from nrt.adapters.catalogue.record import Provider
from nrt.adapters.inference.artifact import MODEL_FILE
from nrt.adapters.inference.weights import CUDA, select_providers

ROOT_PROVIDER: Provider = "cpu"
PROVIDERS: tuple[Provider, ...] = get_args(Provider)


def variant_subdir(provider: Provider) -> str:
    """The variant's directory relative to the artifact's root ("" for the root variant)."""
    return "" if provider == ROOT_PROVIDER else provider


def variant_path(root: Path, provider: Provider) -> Path:
    """Where the ``provider`` variant of the artifact at ``root`` lives (it may not exist)."""
    subdir = variant_subdir(provider)
    return root / subdir if subdir else root


def serving_directory(root: Path, provider: Provider) -> Path:
    """The directory of a local artifact that serves ``provider``: its variant when it holds a
    ``model.onnx``, else ``root`` (the catalogue's own artifacts are verified: see ``find_serving``)."""
    own = variant_path(root, provider)
    return own if (own / MODEL_FILE).is_file() else root


def provider_for(execution_providers: Sequence[str]) -> Provider:
    """The variant that suits a session built with ``execution_providers`` (ONNX Runtime names, in order)."""
    return "cuda" if execution_providers and execution_providers[0] == CUDA else "cpu"


def host_provider() -> Provider:
    """The variant this process's sessions suit: ``cuda`` when onnxruntime-gpu offers CUDA, else ``cpu``."""
    return provider_for(select_providers())


def default_providers() -> tuple[Provider, ...]:
    """What ``nrt models prepare`` builds by default: the root variant, and this host's when it differs."""
    host = host_provider()
    return (ROOT_PROVIDER,) if host == ROOT_PROVIDER else (ROOT_PROVIDER, host)


def parse_provider(text: str) -> Provider:
    """A provider name from the command line or a setting; a clear error for anything else."""
    for provider in PROVIDERS:
        if text == provider:
            return provider
    raise ValueError(f"unknown provider {text!r}; expected one of: {', '.join(PROVIDERS)}")
