"""OpenAI's logit_bias and presence / frequency penalties on one row of logits (pure numpy)."""

from __future__ import annotations

import numpy as np
import pytest

from nrt.adapters.inference.errors import LogitBiasError
from nrt.adapters.inference.penalties import LogitAdjustments
from nrt.adapters.inference.sampling import Sampler

VOCAB = 50


def row(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=VOCAB).astype(np.float32)


def test_nothing_asked_is_inactive_and_leaves_the_logits_alone() -> None:
    adjustments = LogitAdjustments((), 0.0, 0.0)
    assert not adjustments.active
    logits = row()
    adjustments.record(3)
    np.testing.assert_array_equal(adjustments.apply(logits), logits)


def test_logit_bias_adds_to_the_named_tokens_only_on_a_copy() -> None:
    logits = row()
    before = logits.copy()
    adjusted = LogitAdjustments(((4, 100.0), (9, -2.5)), 0.0, 0.0).apply(logits)
    np.testing.assert_array_equal(logits, before)  # the model's row is not touched
    expected = before.copy()
    expected[4] += 100.0
    expected[9] -= 2.5
    np.testing.assert_allclose(adjusted, expected)
    assert int(np.argmax(adjusted)) == 4
    assert Sampler(0.0, 1.0, None).choose(adjusted) == 4  # greedy picks the forced token


def test_penalties_follow_openais_definition_over_the_generated_tokens() -> None:
    presence, frequency = 0.75, 0.5
    adjustments = LogitAdjustments((), presence, frequency)
    assert adjustments.active
    logits = row(1)
    np.testing.assert_array_equal(adjustments.apply(logits), logits)  # nothing generated yet: no penalty
    for token in (5, 5, 7, 5):
        adjustments.record(token)
    expected = logits.copy()
    expected[5] -= 3 * frequency + presence
    expected[7] -= 1 * frequency + presence
    np.testing.assert_allclose(adjustments.apply(logits), expected, rtol=1e-6)


def test_a_negative_penalty_favours_repeats() -> None:
    adjustments = LogitAdjustments((), -2.0, 0.0)
    logits = np.zeros(VOCAB, dtype=np.float32)
    logits[1] = 1.0
    adjustments.record(8)
    assert int(np.argmax(adjustments.apply(logits))) == 8  # 0 + 2 beats 1


def test_penalties_change_a_greedy_sequence() -> None:
    logits = row(2)  # a model that always offers the same row: greedy repeats one token forever
    plain, penalised = Sampler(0.0, 1.0, None), LogitAdjustments((), 0.0, 2.0)
    plain_tokens = [plain.choose(logits) for _ in range(4)]
    penalised_tokens = []
    for _ in range(4):
        token = plain.choose(penalised.apply(logits))
        penalised.record(token)
        penalised_tokens.append(token)
    assert len(set(plain_tokens)) == 1
    assert len(set(penalised_tokens)) > 1


def test_bias_and_penalties_add_up() -> None:
    adjustments = LogitAdjustments(((2, 1.0),), 0.5, 0.25)
    adjustments.record(2)
    logits = row(3)
    assert adjustments.apply(logits)[2] == pytest.approx(logits[2] + 1.0 - 0.5 - 0.25)


@pytest.mark.parametrize("bad", [VOCAB, VOCAB + 7, -1])
def test_a_bias_outside_the_vocabulary_names_the_token(bad: int) -> None:
    adjustments = LogitAdjustments(((3, 1.0), (bad, 1.0)), 0.0, 0.0)
    with pytest.raises(LogitBiasError, match=rf"logit_bias names token {bad}, .* ids 0 to {VOCAB - 1}"):
        adjustments.check(VOCAB)
    LogitAdjustments(((VOCAB - 1, 1.0),), 0.0, 0.0).check(VOCAB)  # the last id is fine
