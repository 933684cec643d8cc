"""Weights in ONNX external data (what a model over 2 GB needs): the standby tier holds the data file's
contents in RAM beside the graph, promotion builds the session from RAM without reading the disk
again, and the artifact's record and size count the data file.

The model here is the tiny Llama saved with its weights in ``model.onnx_data`` (the layout an export
over 2 GB has), so the test runs in seconds; the mechanism does not depend on the size.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import onnx
import pytest

from nrt.adapters.catalogue import prepare_local
from nrt.adapters.inference import bare_greedy, build_session, load_weights
from nrt.adapters.inference.causal import CausalLM


@pytest.fixture
def external_llama(tiny_llama_dir: Path, tmp_path: Path) -> Path:
    directory = tmp_path / "tiny-llama-external"
    shutil.copytree(tiny_llama_dir, directory)
    model = onnx.load(str(directory / "model.onnx"))
    onnx.save(
        model,
        str(directory / "model.onnx"),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location="model.onnx_data",
        size_threshold=0,
    )
    (directory / "nrt-artifact.json").unlink(missing_ok=True)  # its files changed: described again
    return directory


def test_the_weights_live_in_the_data_file(external_llama: Path) -> None:
    graph = onnx.load(str(external_llama / "model.onnx"), load_external_data=False).graph
    stored = [init for init in graph.initializer if init.data_location == onnx.TensorProto.EXTERNAL]
    assert len(stored) == len(graph.initializer) > 0  # every weight is in model.onnx_data


def test_standby_holds_the_data_in_ram_and_promotion_reads_no_disk(
    external_llama: Path, tiny_llama_dir: Path, tmp_path: Path
) -> None:
    weights = load_weights(external_llama)
    assert set(weights.external) == {"model.onnx_data"}
    assert weights.nbytes == sum((external_llama / name).stat().st_size for name in ("model.onnx", "model.onnx_data"))
    prompt = CausalLM.load(tiny_llama_dir).encode("The quick brown fox")
    expected = bare_greedy(build_session(load_weights(tiny_llama_dir), ["CPUExecutionProvider"]), prompt, 8)
    external_llama.rename(tmp_path / "gone")  # the files are not where the model says any more
    session = build_session(weights, ["CPUExecutionProvider"])
    assert bare_greedy(session, prompt, 8) == expected


def test_the_record_and_the_size_count_the_data_file(external_llama: Path) -> None:
    artifact = prepare_local(external_llama)
    names = [entry.path for entry in artifact.record.files]
    assert "model.onnx_data" in names
    assert artifact.record.total_bytes == sum(entry.bytes for entry in artifact.record.files)
    assert artifact.record.total_bytes > (external_llama / "model.onnx_data").stat().st_size
