"""Variants per execution provider: tiny-llama's fp16 ``cuda/`` variant beside its fp32 root.

The CUDA variant is built offline on this CPU host and checked here with CPU onnxruntime,
which runs float16 matmuls too: its structure (fp16 weight matrices, fp32 activations,
key/values and logits, the root's input and output names) and its greedy tokens against the fp32 root, within
the documented tolerance (:data:`nrt.adapters.catalogue.builders.fp16.LOGIT_TOLERANCE`).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import msgspec
import numpy as np
import pytest
from click.testing import CliRunner
from tokenizers import Tokenizer

from nrt.adapters.catalogue import (
    CONFIG_FILE,
    MODEL_FILE,
    RECORD_FILE,
    TOKENIZER_FILE,
    ArtifactRecord,
    PreparedArtifact,
    StepLog,
    find_prepared,
    find_serving,
    get_entry,
    load_record,
    prepare,
    prepare_steps,
    provider_for,
    serving_directory,
    status,
    statuses,
    variant_path,
    verify,
)
from nrt.adapters.catalogue.builders.fp16 import LOGIT_TOLERANCE, logit_error
from nrt.adapters.catalogue.greedy import empty_past, forward, greedy, open_session
from nrt.adapters.inference import bare_greedy, build_session, load_weights
from nrt.entrypoints.cli.main import cli
from nrt.hosting.model_sources import LocalArtifact, resolve

PROMPTS = ("Hello, tiny llama!", "The quick brown fox", "Goodbye", "a")


@pytest.fixture(scope="module")
def both(tmp_path_factory: pytest.TempPathFactory, tiny_llama: PreparedArtifact) -> Path:
    """An NRT_HOME whose tiny-llama has the session's root variant and a ``cuda`` variant added to it."""
    home = tmp_path_factory.mktemp("variants-home")
    shutil.copytree(tiny_llama.directory, home / "models" / "tiny-llama")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("NRT_HOME", str(home))
        log = StepLog()
        prepare("tiny-llama", providers=("cuda",), progress=log)
        assert log.steps == list(prepare_steps(get_entry("tiny-llama"), ("cuda",)))
    return home


@pytest.fixture
def in_both(both: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("NRT_HOME", str(both))
    return both / "models" / "tiny-llama"


def test_the_cuda_variant_is_a_complete_fp16_artifact_beside_the_root(
    in_both: Path, tiny_llama: PreparedArtifact
) -> None:
    cuda = in_both / "cuda"
    assert sorted(path.name for path in cuda.iterdir()) == sorted(
        [MODEL_FILE, TOKENIZER_FILE, CONFIG_FILE, RECORD_FILE]
    )
    record = load_record(cuda)
    assert verify(cuda, record, checksums=True).ok
    assert (record.provider, record.quantization, record.kv_dtype) == ("cuda", "fp16", "float32")
    assert record.recipe == get_entry("tiny-llama").serving("cuda").recipe
    root = tiny_llama.record
    assert root.provider == "cpu"
    assert (record.onnx_inputs, record.onnx_outputs) == (root.onnx_inputs, root.onnx_outputs)
    for field in ("num_layers", "num_kv_heads", "head_dim", "vocab_size", "eos_token_ids", "context_length"):
        assert getattr(record, field) == getattr(root, field), field
    assert load_record(in_both) == root, "adding a variant leaves the root as it was"


def test_the_cuda_graph_stores_fp16_weights_and_keeps_fp32_activations(in_both: Path) -> None:
    onnx = pytest.importorskip("onnx")  # the export extra
    graph = onnx.load(str(in_both / "cuda" / MODEL_FILE)).graph
    root = onnx.load(str(in_both / MODEL_FILE)).graph
    matrices = {init.name for init in root.initializer if len(init.dims) == 2}
    assert len(matrices) == 2 * 7 + 2  # each layer's 7 projections, the embedding and the head
    types = {init.name: init.data_type for init in graph.initializer}
    assert {types.get(f"{name}/fp16") for name in matrices} == {onnx.TensorProto.FLOAT16}
    assert not matrices & set(types), "no fp32 copy of a weight matrix is left"
    floats = [init for init in graph.initializer if init.data_type == onnx.TensorProto.FLOAT]
    assert all(len(init.dims) < 2 for init in floats), [init.name for init in floats]  # norm weights, constants
    kinds = {value.name: value.type.tensor_type.elem_type for value in [*graph.input, *graph.output]}
    assert kinds["logits"] == kinds["past_key_values.0.key"] == kinds["present.1.value"] == onnx.TensorProto.FLOAT
    matmuls = [node for node in graph.node if node.op_type == "MatMul" and node.input[1] in types]
    assert len(matmuls) == 2 * 7 + 1  # the projections and the head: each by its fp16 weight
    assert all(types[node.input[1]] == onnx.TensorProto.FLOAT16 for node in matmuls)


def assert_fp16_agrees_with_fp32(in_both: Path, providers: list[str]) -> None:
    """Teacher-forced over fp32's greedy continuation (on CPU): the fp16 variant's logits on ``providers`` stay
    within LOGIT_TOLERANCE of fp32's scale, and it picks fp32's token wherever fp32's best two are further apart
    than twice that; run free, its greedy tokens are fp32's up to the first step where they are not (a near tie,
    which float16 on another device may break the other way: measured on an H100)."""
    root, cuda = load_record(in_both), load_record(in_both / "cuda")
    fp32, fp16 = open_session(in_both, root, ["CPUExecutionProvider"]), open_session(in_both / "cuda", cuda, providers)
    assert fp16.get_providers()[0] == providers[0]
    tokenizer = Tokenizer.from_file(str(in_both / TOKENIZER_FILE))
    agreed = decided = 0
    for prompt in PROMPTS:
        ids = tokenizer.encode(prompt).ids
        reference = greedy(fp32, root, ids, 24, stop_at_eos=False)
        sequence = np.array([[*ids, *reference.token_ids[:-1]]], dtype=np.int64)
        expected, _ = forward(fp32, root, sequence, empty_past(root))
        got, _ = forward(fp16, cuda, sequence, empty_past(cuda))
        assert logit_error(expected, got) <= LOGIT_TOLERANCE, prompt
        scale = 1.0 + float(np.abs(expected).max())
        clear = []  # per generated token: fp32's best two further apart than twice the tolerance
        for position in range(len(ids) - 1, sequence.shape[1]):
            top2 = np.sort(expected[0, position])[-2:]
            clear.append(bool(top2[1] - top2[0] > 2 * LOGIT_TOLERANCE * scale))
            if clear[-1]:
                decided += 1
                agreed += int(np.argmax(got[0, position]) == np.argmax(expected[0, position]))
        free = greedy(fp16, cuda, ids, 24, stop_at_eos=False)
        decided_steps = clear.index(False) if False in clear else len(clear)
        assert free.token_ids[:decided_steps] == reference.token_ids[:decided_steps], prompt
    assert decided > 0
    assert agreed == decided


def test_fp16_greedy_tokens_match_fp32_within_the_tolerance(in_both: Path) -> None:
    assert_fp16_agrees_with_fp32(in_both, ["CPUExecutionProvider"])


def test_the_bare_loop_runs_the_fp16_variant_from_bytes(in_both: Path) -> None:
    session = build_session(load_weights(in_both / "cuda"), ["CPUExecutionProvider"])
    reference = build_session(load_weights(in_both), ["CPUExecutionProvider"])
    ids = Tokenizer.from_file(str(in_both / TOKENIZER_FILE)).encode(PROMPTS[0]).ids
    assert bare_greedy(session, ids, 16) == bare_greedy(reference, ids, 16)


def test_status_and_serving_per_provider(in_both: Path) -> None:
    states = statuses("tiny-llama", checksums=True)
    assert [(s.provider, s.state) for s in states] == [("cpu", "ready"), ("cuda", "ready")]
    assert [s.directory for s in states] == [in_both, in_both / "cuda"]
    cuda = find_serving("tiny-llama", "cuda")
    assert cuda is not None
    assert (cuda.directory, cuda.record.provider) == (in_both / "cuda", "cuda")
    cpu = find_serving("tiny-llama", "cpu")
    assert cpu is not None
    assert cpu.directory == in_both
    assert variant_path(in_both, "cuda") == in_both / "cuda"
    assert provider_for(["CUDAExecutionProvider", "CPUExecutionProvider"]) == "cuda"
    assert provider_for(["CPUExecutionProvider"]) == "cpu"


def test_the_worker_resolves_the_variant_of_its_provider(in_both: Path, tmp_path: Path) -> None:
    assert resolve("catalogue://tiny-llama", provider="cuda") == LocalArtifact(str(in_both / "cuda"))
    assert resolve("catalogue://tiny-llama", provider="cpu") == LocalArtifact(str(in_both))
    local = tmp_path / "my-export"
    shutil.copytree(in_both, local)
    assert resolve(str(local), provider="cuda") == LocalArtifact(str(local / "cuda"))
    assert resolve(str(local), provider="cpu") == LocalArtifact(str(local))
    shutil.rmtree(local / "cuda")
    assert serving_directory(local, "cuda") == local, "no variant: the root serves CUDA"


def test_a_stale_cuda_variant_falls_back_to_the_root(both: Path, nrt_home: Path, tiny_llama: PreparedArtifact) -> None:
    target = nrt_home / "models" / "tiny-llama"
    shutil.copytree(both / "models" / "tiny-llama", target)
    old = msgspec.structs.replace(load_record(target / "cuda"), recipe="tiny-llama/1+fp16/0")
    (target / "cuda" / RECORD_FILE).write_bytes(msgspec.json.encode(old))
    current = status("tiny-llama", provider="cuda")
    assert current.state == "stale"
    assert current.problem is not None
    assert "tiny-llama/1+fp16/0" in current.problem
    assert find_prepared("tiny-llama", provider="cuda") is None
    served = find_serving("tiny-llama", "cuda")
    assert served is not None
    assert served.directory == target
    assert resolve("catalogue://tiny-llama", provider="cuda") == LocalArtifact(str(target))


def test_rebuilding_the_root_keeps_the_cuda_variant(both: Path, nrt_home: Path) -> None:
    target = nrt_home / "models" / "tiny-llama"
    shutil.copytree(both / "models" / "tiny-llama", target)
    cuda_before = load_record(target / "cuda")
    log = StepLog()
    prepare("tiny-llama", providers=("cpu",), force=True, progress=log)
    assert log.steps == list(prepare_steps(get_entry("tiny-llama")))
    assert "Convert to float16 weights (CUDA variant)" not in log.steps
    assert load_record(target / "cuda") == cuda_before
    assert status("tiny-llama", provider="cuda", checksums=True).state == "ready"


def test_a_catalogue_model_without_a_cuda_variant_says_so(nrt_home: Path) -> None:
    with pytest.raises(ValueError, match="minilm-l6 has no cuda variant"):
        status("minilm-l6", provider="cuda")
    assert get_entry("minilm-l6").serving("cuda").provider == "cpu"


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["models", *args])
    return result.exit_code, result.output


def test_info_shows_both_variants(in_both: Path) -> None:
    code, output = _run("info", "tiny-llama")
    assert code == 0, output
    rows = {line.split("│")[1].strip(): line for line in output.splitlines() if line.count("│") >= 5}
    assert "fp32" in rows["cpu"]
    assert "yes" in rows["cpu"]
    assert "fp16" in rows["cuda"]
    assert "yes" in rows["cuda"]
    code, output = _run("info", "tiny-llama", "--provider", "cuda", "--json")
    assert code == 0, output
    assert msgspec.json.decode(output, type=ArtifactRecord) == load_record(in_both / "cuda")


def test_info_and_prepare_of_the_cuda_variant_from_the_cli(nrt_home: Path, tiny_llama: PreparedArtifact) -> None:
    shutil.copytree(tiny_llama.directory, nrt_home / "models" / "tiny-llama")
    code, output = _run("info", "tiny-llama")
    assert code == 0, output
    cuda_row = next(line for line in output.splitlines() if line.count("│") >= 5 and "fp16" in line)
    assert "no" in cuda_row
    code, output = _run("info", "tiny-llama", "--provider", "cuda")
    assert code == 1
    assert "nrt models prepare tiny-llama --provider cuda" in output
    code, output = _run("prepare", "tiny-llama", "--provider", "cuda")
    assert code == 0, output
    assert "Convert to float16 weights (CUDA variant)" in output
    assert "prepared tiny-llama (cuda variant)" in output
    assert status("tiny-llama", provider="cuda").state == "ready"
    code, output = _run("prepare", "tiny-llama", "--provider", "all")
    assert code == 0, output
    assert output.count("already prepared and verified") == 2
    code, output = _run("info", "minilm-l6", "--provider", "cuda")
    assert code == 1
    assert "minilm-l6 has no cuda variant" in output


@pytest.mark.gpu
def test_on_cuda_the_cuda_variant_decodes_what_the_fp32_root_decodes_on_cpu(in_both: Path) -> None:
    """The fp16-weight variant on the CUDA provider against the fp32 root on CPU, greedy, per the tolerance."""
    providers = ["CUDAExecutionProvider", "CPUExecutionProvider"]
    assert_fp16_agrees_with_fp32(in_both, providers)
    served = find_serving("tiny-llama", provider_for(providers))
    assert served is not None
    assert served.directory == in_both / "cuda"
