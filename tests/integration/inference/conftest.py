"""Fixtures for the inference engine tests: tiny real ONNX models, built once and cached.

The models are random but seeded, exported with optimum exactly like the catalogue's
artifacts (one self-contained model.onnx with past key values, tokenizer.json,
config.json, nrt-artifact.json). They are cached in pytest's cache dir between runs.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from nrt.adapters.inference import BatchingGenerator, CausalLM, build_session, load_weights
from nrt.testing.tiny_models import build_tiny_gemma3, build_tiny_llama, cached_build


@pytest.fixture(scope="session")
def tiny_llama_dir(tiny_models_root: Path) -> Path:
    return cached_build(tiny_models_root, "tiny-llama", build_tiny_llama)


@pytest.fixture(scope="session")
def tiny_bert_dir(tiny_artifacts: Path) -> Path:
    return tiny_artifacts / "tiny-bert"


@pytest.fixture(scope="session")
def tiny_gemma3_dir(tiny_models_root: Path) -> Path:
    return cached_build(tiny_models_root, "tiny-gemma3", build_tiny_gemma3)


@pytest.fixture(scope="session")
def tiny_gemma3_no_positions_dir(tiny_models_root: Path) -> Path:
    return cached_build(
        tiny_models_root, "tiny-gemma3-no-positions", lambda out: build_tiny_gemma3(out, position_ids=False)
    )


@pytest.fixture(scope="session", params=["host-views", "helper-graphs"])
def tiny_llama(request: pytest.FixtureRequest, tiny_llama_dir: Path) -> CausalLM:
    """The CPU provider's serving path (logits read as numpy views), and the path every other
    device takes (logits through the helper graphs), so CI runs the device logic without a GPU."""
    session = build_session(load_weights(tiny_llama_dir), ["CPUExecutionProvider"])
    return CausalLM(session, tiny_llama_dir, helper_graphs=request.param == "helper-graphs")


@pytest.fixture
async def generator(tiny_llama: CausalLM) -> AsyncIterator[BatchingGenerator]:
    gen = BatchingGenerator(tiny_llama, max_batch_size=8)
    yield gen
    await gen.aclose()
