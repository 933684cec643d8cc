"""Token log-probabilities in OpenAI's shape from one row of logits (pure numpy, an in-memory tokenizer)."""

from __future__ import annotations

import numpy as np
import pytest
from tokenizers import Tokenizer
from tokenizers.models import WordLevel

from nrt.adapters.inference.logprobs import LogprobRecorder
from nrt.adapters.inference.penalties import LogitAdjustments
from nrt.adapters.inference.sampling import Sampler

WORDS = ["<unk>", "a", "b", "c", "d", "é", "f", "g"]


def tokenizer() -> Tokenizer:
    return Tokenizer(WordLevel({word: i for i, word in enumerate(WORDS)}, unk_token="<unk>"))


def log_softmax(row: np.ndarray) -> np.ndarray:
    wide = row.astype(np.float64)
    return wide - np.log(np.exp(wide - wide.max()).sum()) - wide.max()


def test_the_chosen_tokens_logprob_is_the_log_softmax_with_the_top_alternatives_in_order() -> None:
    row = np.array([0.1, 2.0, -1.0, 3.5, 0.0, 1.0, -3.0, 2.5], dtype=np.float32)
    expected = log_softmax(row)
    entry = LogprobRecorder(tokenizer(), top=3).entry(row, 1)
    assert (entry.token, entry.bytes) == ("a", (97,))
    assert entry.logprob == pytest.approx(expected[1], abs=1e-5)
    assert [t.token for t in entry.top_logprobs] == ["c", "g", "a"]
    assert [t.logprob for t in entry.top_logprobs] == pytest.approx(sorted(expected, reverse=True)[:3], abs=1e-5)
    assert sum(np.exp(t.logprob) for t in entry.top_logprobs) < 1.0


def test_greedy_picks_the_first_alternative_and_bytes_are_utf8() -> None:
    row = np.array([0.0, 0.0, 0.0, 0.0, 0.0, 9.0, 0.0, 0.0], dtype=np.float32)
    token = Sampler(0.0, 1.0, None).choose(row)
    entry = LogprobRecorder(tokenizer(), top=1).entry(row, token)
    assert entry.token == entry.top_logprobs[0].token == "é"
    assert entry.bytes == (0xC3, 0xA9)
    assert entry.logprob == entry.top_logprobs[0].logprob


def test_no_alternatives_unless_asked_and_at_most_twenty() -> None:
    row = np.zeros(len(WORDS), dtype=np.float32)
    assert LogprobRecorder(tokenizer(), top=0).entry(row, 2).top_logprobs == ()
    assert LogprobRecorder(tokenizer(), top=99).top == 20
    assert len(LogprobRecorder(tokenizer(), top=20).entry(row, 2).top_logprobs) == len(WORDS)  # the whole vocabulary
    assert LogprobRecorder(tokenizer(), top=0).entry(row, 2).logprob == pytest.approx(-np.log(len(WORDS)))


def test_logit_bias_shows_in_the_logprobs() -> None:
    row = np.zeros(len(WORDS), dtype=np.float32)
    biased = LogitAdjustments(((4, 100.0),), 0.0, 0.0).apply(row)
    entry = LogprobRecorder(tokenizer(), top=2).entry(biased, 4)
    assert entry.token == "d"
    assert entry.logprob == pytest.approx(0.0, abs=1e-6)  # the bias made it certain
    assert entry.top_logprobs[1].logprob < -90


def test_a_byte_level_tokens_bytes_are_its_raw_bytes() -> None:
    from tokenizers import decoders, models

    vocab = {"Ã": 0, "©": 1, "h": 2, "Ġ": 3}  # GPT-2's alphabet: "Ã©" is é's two bytes, "Ġ" a space
    byte_level = Tokenizer(models.BPE(vocab, []))
    byte_level.decoder = decoders.ByteLevel()
    recorder = LogprobRecorder(byte_level, top=0)
    row = np.zeros(len(vocab), dtype=np.float32)
    first, second = recorder.entry(row, 0), recorder.entry(row, 1)
    assert (first.token, first.bytes, second.bytes) == ("\ufffd", (0xC3,), (0xA9,))
    assert bytes(first.bytes + second.bytes).decode() == "é"
    assert recorder.entry(row, 3).bytes == (0x20,)


@pytest.mark.parametrize("spread", [0.1, 3.0, 40.0])
def test_the_top_alternatives_are_exact_however_flat_or_peaked_the_row(spread: float) -> None:
    words = [f"w{i}" for i in range(3000)]
    large = Tokenizer(WordLevel({word: i for i, word in enumerate(words)}, unk_token="w0"))
    row = (np.random.default_rng(5).normal(size=len(words)) * spread).astype(np.float32)
    entry = LogprobRecorder(large, top=20).entry(row, 0)
    expected = np.argsort(-row, kind="stable")[:20]
    assert [t.token for t in entry.top_logprobs] == [words[i] for i in expected]
    assert [t.logprob for t in entry.top_logprobs] == pytest.approx(log_softmax(row)[expected], abs=1e-4)
