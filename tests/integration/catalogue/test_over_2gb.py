"""A model whose weights exceed 2 GB (issue 26): a random Llama checkpoint with 2.2 GB of fp32 weights
(a small vocabulary, wide layers), put in a Hugging Face cache and resolved as an ``hf://`` source
offline with ``quantization: none``, so its ONNX export is past protobuf's 2 GB and keeps its weights
in a data file. The worker's resolution prepares it; the worker's model host holds it at standby
(the data file's contents in RAM), makes it resident from RAM and generates a token.

Marked ``heavy``: minutes (9 on a busy shared 2-core host), 9 GB of RAM and about 7 GB of disk at
the peak (the files are removed when it ends); ``scripts/test`` runs it as a step of its own.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nrt.adapters.catalogue import load_record
from nrt.adapters.inference import ArtifactRegistry, BatchingGenerator, GenerationRequest
from nrt.core.manifest import ModelSpec, Role, WeightFormat
from nrt.core.vocabulary import Tier
from nrt.hosting.model_host import ModelHost
from nrt.hosting.model_sources import LocalArtifact, resolve
from nrt.testing.hf_checkpoints import put_in_cache, save_checkpoint

pytestmark = [pytest.mark.heavy, pytest.mark.timeout(1800)]  # past the suite's 600 s on a busy host

PROTOBUF_LIMIT = 2**31  # bytes: one ONNX protobuf holds no more; past it, the weights go in a data file
# 9 layers of 60.8 M parameters (GQA: 4 key/value heads of 16) + two 2048 x 384 tables: 547 M, 2.19 GB in fp32
CONFIG = {
    "hidden_size": 2048,
    "intermediate_size": 8192,
    "num_hidden_layers": 9,
    "num_attention_heads": 16,
    "num_key_value_heads": 4,
}
DATA_FILE = "model.onnx_data"


@pytest.fixture
def big_home(hf_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An empty NRT_HOME and Hugging Face cache, both deleted when the test ends (pytest keeps the last
    runs' temporary directories: gigabytes each here)."""
    home = tmp_path / "nrt-home"
    monkeypatch.setenv("NRT_HOME", str(home))
    try:
        yield hf_cache
    finally:
        for directory in (home, hf_cache, tmp_path / "checkpoint"):
            shutil.rmtree(directory, ignore_errors=True)


async def test_a_model_over_2_gb_is_prepared_held_in_ram_made_resident_and_generates(
    big_home: Path, tmp_path: Path
) -> None:
    started = time.perf_counter()
    checkpoint = save_checkpoint(tmp_path / "checkpoint", "llama", seed=3, config=CONFIG)
    weight_bytes = sum(path.stat().st_size for path in checkpoint.glob("*.safetensors"))
    assert weight_bytes > PROTOBUF_LIMIT
    put_in_cache(big_home, "acme/big-llama", checkpoint)
    shutil.rmtree(checkpoint)  # the cache holds its own copy
    built = time.perf_counter() - started

    source = "hf://acme/big-llama"
    spec = ModelSpec(id="big", role=Role.SPECIALIST, source=source, quantization=WeightFormat.NONE)
    started = time.perf_counter()
    target = await asyncio.to_thread(resolve, source, spec, "cpu")  # the worker's resolution prepares it
    prepared = time.perf_counter() - started
    assert isinstance(target, LocalArtifact)
    directory = Path(target.path)
    data = directory / DATA_FILE
    assert data.is_file()  # the artifact keeps its weights beside the graph
    assert data.stat().st_size > PROTOBUF_LIMIT
    assert (directory / "model.onnx").stat().st_size < PROTOBUF_LIMIT
    record = load_record(directory)
    assert record.quantization == "fp32"
    assert DATA_FILE in [entry.path for entry in record.files]
    assert record.total_bytes > data.stat().st_size  # the budget counts the data file

    host = ModelHost(ArtifactRegistry(["CPUExecutionProvider"]), max_batch_size=1)
    try:
        standby = await asyncio.to_thread(host.load, "big", source, target)
        assert (standby.from_tier, standby.to_tier) == (Tier.UNLOADED, Tier.STANDBY)
        held = host.registry.weights("big")
        assert set(held.external) == {DATA_FILE}  # the data file's contents are in RAM, not only on disk
        assert len(held.external[DATA_FILE]) == data.stat().st_size
        assert standby.bytes_held == held.nbytes > PROTOBUF_LIMIT

        resident = await asyncio.to_thread(host.promote, "big")
        assert (resident.from_tier, resident.to_tier) == (Tier.STANDBY, Tier.RESIDENT)
        assert resident.bytes_held >= held.nbytes
        runtime = host.runtime("big")
        assert isinstance(runtime, BatchingGenerator)
        started = time.perf_counter()
        request = GenerationRequest(prompt="hello there", max_tokens=2, ignore_eos=True)
        chunks = [chunk async for chunk in runtime.generate(request)]
        generated = time.perf_counter() - started
        assert len([token for chunk in chunks for token in chunk.token_ids]) >= 1
    finally:
        host.close()
    print(
        f"\nmodel over 2 GB: {weight_bytes / 1e9:.2f} GB of weights ({record.total_bytes / 1e9:.2f} GB prepared, "
        f"{held.nbytes / 1e9:.2f} GB held in RAM): checkpoint built in {built:.1f} s, prepared in {prepared:.1f} s, "
        f"standby in {standby.elapsed_ms / 1e3:.1f} s, resident in {resident.elapsed_ms / 1e3:.1f} s, "
        f"2 tokens in {generated:.1f} s"
    )
