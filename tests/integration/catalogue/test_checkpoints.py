"""The operator's own models: real Hugging Face checkpoints of each supported architecture, resolved as
``hf://`` sources through the real ``huggingface_hub`` code from a Hugging Face cache (offline), prepared
once, and checked against PyTorch; a local checkpoint directory; and every bad source a clear error
that leaves nothing half-prepared behind."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from nrt.adapters import settings
from nrt.adapters.catalogue import SourceError, load_record, locate
from nrt.adapters.catalogue.checkpoints import DECODERS, ENCODERS, TOLERANCE, variant_output
from nrt.adapters.catalogue.locate import CheckpointNotPrepared
from nrt.adapters.catalogue.record import ArtifactRecord
from nrt.adapters.inference import CausalLM, build_session, load_weights
from nrt.adapters.inference.bare import bare_greedy
from nrt.core.manifest import ModelSpec, Role, WeightFormat
from nrt.hosting.model_sources import LocalArtifact, resolve
from nrt.testing.hf_checkpoints import ARCHITECTURES, put_in_cache, save_checkpoint
from serving_check import served_tokens

PROMPT_IDS = [1, 40, 41, 42, 43, 44, 45]


@pytest.fixture
def hub(hf_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty Hugging Face cache, read offline (HF_HUB_OFFLINE), and an empty NRT_HOME."""
    monkeypatch.setenv("NRT_HOME", str(tmp_path / "nrt-home"))
    return hf_cache


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One tiny random checkpoint per supported architecture, saved with save_pretrained."""
    root = tmp_path_factory.mktemp("checkpoints")
    return {kind: save_checkpoint(root / kind, kind, seed=7) for kind in ARCHITECTURES}


def torch_output(checkpoint: Path, kind: str, ids: list[int]) -> np.ndarray:
    import transformers

    auto = transformers.AutoModelForCausalLM if kind in DECODERS else transformers.AutoModel
    model = auto.from_pretrained(str(checkpoint), torch_dtype=torch.float32).eval()
    with torch.no_grad():
        tensor = torch.tensor([ids])
        output = model(input_ids=tensor, attention_mask=torch.ones_like(tensor))
    out = output.logits if kind in DECODERS else output.last_hidden_state
    result: np.ndarray = out[0].numpy()
    return result


def prepared(source: str) -> tuple[Path, ArtifactRecord]:
    served = resolve(source, provider="cpu")
    assert isinstance(served, LocalArtifact)
    return Path(served.path), load_record(Path(served.path))


def test_the_supported_architectures_are_the_ones_built_here() -> None:
    assert set(ARCHITECTURES) <= set(DECODERS) | set(ENCODERS)
    assert {"llama", "mistral", "qwen2", "qwen3", "phi3", "gemma2", "gemma3_text", "granite", "bert"} <= set(
        ARCHITECTURES
    )


@pytest.mark.parametrize("kind", sorted(ARCHITECTURES))
def test_an_hf_checkpoint_is_prepared_once_and_agrees_with_pytorch(
    kind: str, hub: Path, checkpoints: dict[str, Path]
) -> None:
    commit = put_in_cache(hub, f"acme/tiny-{kind}", checkpoints[kind])
    source = f"hf://acme/tiny-{kind}"
    with pytest.raises(CheckpointNotPrepared, match="a worker prepares it when it loads it"):
        locate(source, "cpu")  # in the cache, not prepared: nothing is built by a look-up

    directory, record = prepared(source)  # the worker's resolution prepares it
    assert record.source == f"hf://acme/tiny-{kind}@{commit}"  # the commit the weights came from
    assert record.kind == ("causal-lm" if kind in DECODERS else "encoder")
    assert directory.parent == settings.models_dir()
    built = (directory / "model.onnx").stat().st_mtime_ns
    assert prepared(source)[0] == directory  # the second time it is found, not built again
    assert (directory / "model.onnx").stat().st_mtime_ns == built

    expected = torch_output(checkpoints[kind], kind, PROMPT_IDS)
    got = variant_output(directory, record, PROMPT_IDS)
    scale = 1.0 + float(np.abs(expected).max())
    assert float(np.abs(got - expected).max()) / scale <= TOLERANCE[record.quantization or "fp32"]
    if kind in DECODERS:  # greedy continuations agree where the model is not torn between two tokens
        assert int(np.argmax(got[-1])) == int(np.argmax(expected[-1])) or np.sort(expected[-1])[-2] > (
            expected[-1].max() - 0.5
        )


async def test_a_prepared_checkpoint_generates_through_the_serving_path(
    hub: Path, checkpoints: dict[str, Path]
) -> None:
    put_in_cache(hub, "acme/tiny-qwen2", checkpoints["qwen2"])
    directory, _ = prepared("hf://acme/tiny-qwen2")
    await served_tokens(directory)


def test_a_revision_can_be_pinned_and_an_unknown_one_names_what_the_cache_holds(
    hub: Path, checkpoints: dict[str, Path]
) -> None:
    commit = put_in_cache(hub, "acme/pinned", checkpoints["llama"], revision="v1")
    _, record = prepared(f"hf://acme/pinned@{commit}")
    assert record.source == f"hf://acme/pinned@{commit}"
    assert prepared("hf://acme/pinned@v1")[1].source == record.source  # the tag names the same commit
    with pytest.raises(SourceError, match=r"revision 'v2' is not in the Hugging Face cache .* holds v1, commit"):
        locate("hf://acme/pinned@v2", "cpu")


def test_a_local_checkpoint_directory_is_prepared_as_an_hf_source_is(hub: Path, checkpoints: dict[str, Path]) -> None:
    _, record = prepared(str(checkpoints["mistral"]))
    assert record.source.startswith(f"local:{checkpoints['mistral'].resolve()}#")
    assert record.kind == "causal-lm"


def no_artifacts_left() -> list[str]:
    root = settings.models_dir()
    return sorted(path.name for path in root.iterdir()) if root.is_dir() else []


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("hf://acme/absent", r"hf://acme/absent: not in the Hugging Face cache .* HF_HUB_OFFLINE is set"),
        ("hf://acme", r"hf://acme: not in the Hugging Face cache"),
        ("hf://acme/bad--name", r"expected hf://<org>/<name>\[@revision\]"),
        ("hf://acme/x@..", r"is not a branch, tag or commit name"),
        ("gopher://acme/x", r"the gopher:// scheme cannot be fetched here"),
    ],
)
def test_a_bad_source_is_a_clear_error_and_nothing_is_prepared(hub: Path, source: str, message: str) -> None:
    with pytest.raises(SourceError, match=message):
        locate(source, "cpu")
    assert no_artifacts_left() == []


def test_an_unsupported_architecture_names_it_and_the_supported_ones(hub: Path, tmp_path: Path) -> None:
    import transformers

    directory = tmp_path / "gpt2"
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64))
    model.save_pretrained(directory, safe_serialization=True)
    (directory / "tokenizer.json").write_text("{}")
    put_in_cache(hub, "acme/tiny-gpt2", directory)
    with pytest.raises(
        SourceError, match=r"model_type 'gpt2' \(GPT2LMHeadModel\) is not supported; supported are decoders: llama"
    ):
        locate("hf://acme/tiny-gpt2", "cpu")
    assert no_artifacts_left() == []


def test_a_checkpoint_that_fails_to_build_leaves_nothing_half_prepared(
    hub: Path, tmp_path: Path, checkpoints: dict[str, Path]
) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    for path in checkpoints["llama"].iterdir():
        (broken / path.name).write_bytes(path.read_bytes())
    (broken / "model.safetensors").write_bytes(b"not safetensors")  # the weights cannot be read
    put_in_cache(hub, "acme/broken", broken)
    with pytest.raises(Exception, match="could not be prepared"):
        resolve("hf://acme/broken", provider="cpu")
    leftovers = [name for name in no_artifacts_left() if not name.endswith(".lock")]  # the build lock stays
    assert leftovers == []


@pytest.mark.parametrize(
    ("weights", "quantization"),
    [(WeightFormat.INT4, "int4"), (WeightFormat.NONE, "fp32"), (WeightFormat.FP16, "fp16")],
)
def test_the_manifest_chooses_the_weight_format_each_prepared_apart_and_checked(
    weights: WeightFormat, quantization: str, hub: Path, checkpoints: dict[str, Path]
) -> None:
    put_in_cache(hub, "acme/formats", checkpoints["qwen3"])
    default_dir, default = prepared("hf://acme/formats")
    spec = ModelSpec(id="m", role=Role.SPECIALIST, source="hf://acme/formats", quantization=weights)
    served = resolve("hf://acme/formats", spec, provider="cpu")
    assert isinstance(served, LocalArtifact)
    record = load_record(Path(served.path))
    assert (default.quantization, record.quantization) == ("int8-dynamic", quantization)
    assert record.source == default.source  # the same weights at the same commit, stored another way
    model_bytes = (Path(served.path) / "model.onnx").stat().st_size
    default_bytes = (default_dir / "model.onnx").stat().st_size
    if weights is WeightFormat.INT4:
        assert model_bytes < default_bytes
    else:
        assert model_bytes > default_bytes
    expected = torch_output(checkpoints["qwen3"], "qwen3", PROMPT_IDS)
    got = variant_output(Path(served.path), record, PROMPT_IDS)
    scale = 1.0 + float(np.abs(expected).max())
    assert float(np.abs(got - expected).max()) / scale <= TOLERANCE[record.quantization or "fp32"]


def test_a_weight_format_for_a_source_served_as_built_is_an_error(hub: Path) -> None:
    with pytest.raises(SourceError, match="'quantization: int4' applies to an operator's checkpoint"):
        locate("catalogue://tiny-llama", "cpu", weights=WeightFormat.INT4)


def test_a_model_saved_with_external_data_is_prepared_counted_and_served(
    hub: Path, checkpoints: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    from nrt.adapters.catalogue.builders import export

    monkeypatch.setattr(export, "EXTERNAL_DATA_ABOVE", 0)  # as a model over 2 GB is saved: weights in a data file
    put_in_cache(hub, "acme/big", checkpoints["llama"])
    spec = ModelSpec(id="m", role=Role.SPECIALIST, source="hf://acme/big", quantization=WeightFormat.NONE)
    served = resolve("hf://acme/big", spec, provider="cpu")
    assert isinstance(served, LocalArtifact)
    directory = Path(served.path)
    record = load_record(directory)
    assert "model.onnx_data" in [entry.path for entry in record.files]
    assert record.total_bytes > (directory / "model.onnx_data").stat().st_size  # the budget counts it
    expected = torch_output(checkpoints["llama"], "llama", PROMPT_IDS)
    got = variant_output(directory, record, PROMPT_IDS)
    assert float(np.abs(got - expected).max()) / (1.0 + float(np.abs(expected).max())) <= TOLERANCE["fp32"]
    model = CausalLM(build_session(load_weights(directory), ["CPUExecutionProvider"]), directory)
    assert len(bare_greedy(model.session, model.encode("hello"), 3)) == 3


def test_a_model_protobuf_cannot_measure_keeps_its_weights_in_a_data_file() -> None:
    from google.protobuf.message import EncodeError

    from nrt.adapters.catalogue.builders.export import needs_external_data

    class OverTwoGigabytes:  # what protobuf does with a model past 2 GB (a real 2.4 GB Llama did this)
        def ByteSize(self) -> int:
            raise EncodeError("Failed to serialize proto")

    class Small:
        def ByteSize(self) -> int:
            return 1000

    assert needs_external_data(OverTwoGigabytes())
    assert not needs_external_data(Small())
