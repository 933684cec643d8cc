"""GGUF files read without their weights: the header, the checks a source passes before anything is
built, the config.json and tokenizer a file becomes. The files are written byte by byte."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from nrt.adapters.catalogue.checkpoints import UnsupportedArchitecture
from nrt.adapters.catalogue.gguf_config import hf_config, llama3_factors
from nrt.adapters.catalogue.gguf_header import BadGguf, read_header
from nrt.adapters.catalogue.gguf_source import gguf_checkpoint
from nrt.adapters.catalogue.gguf_tokenizer import gguf_tokenizer
from nrt.adapters.inference.errors import ArtifactError
from nrt.testing.gguf_files import write_raw_gguf

TOKENS = ["a", "b", "ab", "Ġ", "<|im_end|>", "<s>"]


def llama_fields(arch: str = "llama", **extra: Any) -> dict[str, Any]:
    return {
        "general.architecture": arch,
        "general.name": "tiny",
        f"{arch}.context_length": 256,
        f"{arch}.embedding_length": 64,
        f"{arch}.block_count": 2,
        f"{arch}.feed_forward_length": 128,
        f"{arch}.attention.head_count": 4,
        f"{arch}.attention.head_count_kv": 2,
        f"{arch}.rope.freq_base": 10000.0,
        f"{arch}.attention.layer_norm_rms_epsilon": 1e-6,
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": "gpt-2",
        "tokenizer.ggml.tokens": TOKENS,
        "tokenizer.ggml.token_type": [1, 1, 1, 1, 3, 3],
        "tokenizer.ggml.merges": ["a b"],
        "tokenizer.ggml.bos_token_id": 5,
        "tokenizer.ggml.eos_token_id": 5,
        "tokenizer.chat_template": "{{ messages[0]['content'] }}",
        **extra,
    }


def embeddings() -> dict[str, np.ndarray]:
    return {"token_embd.weight": np.zeros((len(TOKENS), 64), dtype=np.float32)}


def tiny(tmp_path: Path, name: str = "tiny.gguf", **extra: Any) -> Path:
    return write_raw_gguf(tmp_path / name, llama_fields(**extra), embeddings())


def test_the_header_holds_the_metadata_and_where_each_tensor_is(tmp_path: Path) -> None:
    header = read_header(tiny(tmp_path))
    assert header.version == 3
    assert header.architecture == "llama"
    assert header.arch_field("block_count") == 2
    assert header.fields["llama.attention.layer_norm_rms_epsilon"] == 1e-6  # float32, read as written
    assert header.fields["tokenizer.ggml.tokens"] == TOKENS
    (tensor,) = header.tensors
    assert (tensor.name, tensor.shape, tensor.ggml_type) == ("token_embd.weight", (6, 64), 0)
    assert tensor.n_bytes == 6 * 64 * 4
    assert tensor.offset % 32 == 0
    assert header.parameters == 6 * 64


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "is not a GGUF file"),
        (b"PK\x03\x04 a zip archive", "is not a GGUF file"),
        (b"GGUF\x03\x00", "cut short"),
    ],
)
def test_a_file_that_is_not_a_gguf_says_so(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "x.gguf"
    path.write_bytes(content)
    with pytest.raises(BadGguf, match=message):
        read_header(path)


def test_a_truncated_gguf_says_where_it_is_cut(tmp_path: Path) -> None:
    whole = tiny(tmp_path).read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(whole[: len(whole) - 100])  # the tensor data is cut short
    with pytest.raises(BadGguf, match=r"is cut short: tensor token_embd.weight ends at byte"):
        read_header(cut)
    cut.write_bytes(whole[:200])  # the metadata is cut short
    with pytest.raises(BadGguf, match="cut short"):
        read_header(cut)


def test_another_version_or_byte_order_is_named(tmp_path: Path) -> None:
    old = write_raw_gguf(tmp_path / "v1.gguf", llama_fields(), version=1)
    with pytest.raises(BadGguf, match="GGUF version 1 is not supported"):
        read_header(old)
    swapped = write_raw_gguf(tmp_path / "be.gguf", llama_fields(), version=3 << 24)
    with pytest.raises(BadGguf, match="big-endian"):
        read_header(swapped)


def test_a_gguf_source_is_content_addressed(tmp_path: Path) -> None:
    path = tiny(tmp_path, "my-model.Q8_0.gguf")
    checkpoint = gguf_checkpoint(path)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert checkpoint.provenance == f"gguf:{path.resolve()}#{digest}"
    assert checkpoint.name.startswith("user-gguf-my-model-q8-0-")
    assert (checkpoint.model_type, checkpoint.kind, checkpoint.gguf) == ("llama", "causal-lm", path.resolve())
    assert checkpoint.weight_bytes == 6 * 64 * 4  # de-quantised to float32
    assert gguf_checkpoint(path).name == checkpoint.name
    assert gguf_checkpoint(path, "int4").name != checkpoint.name  # another cpu variant, another artifact
    tiny(tmp_path, "my-model.Q8_0.gguf", **{"general.name": "rewritten"})
    assert gguf_checkpoint(path).name != checkpoint.name  # new content, new artifact


def test_a_missing_file_or_a_directory_is_not_a_gguf_source(tmp_path: Path) -> None:
    with pytest.raises(BadGguf, match=r"gguf:.*absent.gguf: no such GGUF file"):
        gguf_checkpoint(tmp_path / "absent.gguf")
    (tmp_path / "dir.gguf").mkdir()
    with pytest.raises(BadGguf, match="is not a file"):
        gguf_checkpoint(tmp_path / "dir.gguf")


def test_an_unsupported_architecture_names_it_and_the_supported_ones(tmp_path: Path) -> None:
    path = write_raw_gguf(tmp_path / "mamba.gguf", llama_fields("mamba"), embeddings())
    with pytest.raises(
        UnsupportedArchitecture,
        match=r"GGUF architecture 'mamba' is not supported; supported are llama, qwen2, qwen3, phi3, gemma2, gemma3",
    ):
        gguf_checkpoint(path)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"split.count": 3, "split.no": 0}, r"is part 1 of a GGUF split in 3 files; merge them"),
        ({"tokenizer.ggml.model": "bert"}, r"tokenizer kind 'bert' is not supported"),
        ({"tokenizer.ggml.pre": "chatglm-bpe"}, r"pre-tokenizer 'chatglm-bpe' \(tokenizer.ggml.pre\) is not supported"),
    ],
)
def test_what_the_header_rules_out_is_an_error_before_any_build(
    tmp_path: Path, extra: dict[str, Any], message: str
) -> None:
    with pytest.raises(ArtifactError, match=message):
        gguf_checkpoint(tiny(tmp_path, **extra))


def test_a_vocabulary_only_gguf_is_not_a_model(tmp_path: Path) -> None:
    path = write_raw_gguf(tmp_path / "vocab.gguf", llama_fields())
    with pytest.raises(BadGguf, match="holds no tensors"):
        gguf_checkpoint(path)


def test_the_config_is_what_llama_cpp_wrote(tmp_path: Path) -> None:
    config = hf_config(read_header(tiny(tmp_path, **{"llama.rope.dimension_count": 16})))
    assert config == {
        "model_type": "llama",
        "max_position_embeddings": 256,
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "intermediate_size": 128,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "bos_token_id": 5,
        "eos_token_id": 5,
        "vocab_size": len(TOKENS),
        "tie_word_embeddings": True,  # no output.weight
    }


def test_gemma_phi3_and_rope_scaling_carry_over(tmp_path: Path) -> None:
    gemma = read_header(
        write_raw_gguf(
            tmp_path / "g.gguf",
            llama_fields(
                "gemma3",
                **{
                    "gemma3.attention.key_length": 32,
                    "gemma3.attention.sliding_window": 512,
                    "gemma3.rope.scaling.type": "linear",
                    "gemma3.rope.scaling.factor": 8.0,
                },
            ),
            embeddings(),
        )
    )
    config = hf_config(gemma)
    assert config["model_type"] == "gemma3_text"
    assert (config["head_dim"], config["query_pre_attn_scalar"], config["sliding_window"]) == (32, 32, 512)
    assert config["rope_scaling"] == {"rope_type": "linear", "factor": 8.0}
    phi3 = read_header(write_raw_gguf(tmp_path / "p.gguf", llama_fields("phi3", **{"phi3.rope.dimension_count": 12})))
    assert hf_config(phi3)["partial_rotary_factor"] == 0.75
    odd = read_header(write_raw_gguf(tmp_path / "o.gguf", llama_fields(**{"llama.rope.scaling.type": "su"})))
    with pytest.raises(ArtifactError, match="RoPE scaling 'su' is not supported"):
        hf_config(odd)


def test_llama3_rope_frequency_factors_become_its_rope_scaling(tmp_path: Path) -> None:
    scaling = {
        "rope_type": "llama3",
        "factor": 32.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    }
    factors = llama3_factors(scaling, 64, 500000.0)
    assert factors[0] == 1.0  # the highest frequency is kept
    assert factors[-1] == 32.0  # the lowest is divided by the factor
    fields = llama_fields(**{"llama.rope.freq_base": 500000.0, "llama.attention.head_count": 1})
    tensors = {**embeddings(), "rope_freqs.weight": factors.astype(np.float32)}
    assert hf_config(read_header(write_raw_gguf(tmp_path / "l3.gguf", fields, tensors)))["rope_scaling"] == scaling
    tensors["rope_freqs.weight"] = np.linspace(1, 4, 32, dtype=np.float32)
    with pytest.raises(ArtifactError, match=r"RoPE frequency factors .* are not Llama 3's"):
        hf_config(read_header(write_raw_gguf(tmp_path / "odd.gguf", fields, tensors)))


def test_a_bpe_vocabulary_its_merges_do_not_fit_is_an_artifact_error(tmp_path: Path) -> None:
    header = read_header(tiny(tmp_path, **{"tokenizer.ggml.merges": ["a x"]}))
    with pytest.raises(ArtifactError, match="its BPE vocabulary and merges do not fit together"):
        gguf_tokenizer(header)


def test_the_tokenizer_is_the_files_own(tmp_path: Path) -> None:
    built = gguf_tokenizer(read_header(tiny(tmp_path, **{"tokenizer.ggml.add_bos_token": True})), 256)
    assert built.tokenizer.encode("ab").ids == [5, 2]  # <s>, then the merged pair
    assert built.tokenizer.encode("b<|im_end|>", add_special_tokens=False).ids == [1, 4]  # a control token is whole
    assert built.end_of_turn == (5, 4)  # the end of sequence, and <|im_end|> as llama.cpp recognises it
    assert built.config["chat_template"] == "{{ messages[0]['content'] }}"
    assert built.config["bos_token"] == built.config["eos_token"] == "<s>"
    assert built.config["model_max_length"] == 256
