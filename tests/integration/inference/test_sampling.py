"""Nucleus sampling is exact (same set as a full sort), top-k keeps the k most likely tokens,
and sampling is reproducible per seed."""

from __future__ import annotations

import numpy as np

from nrt.adapters.inference.sampling import Sampler, _nucleus


def brute_force_nucleus(probs: np.ndarray, top_p: float) -> set[int]:
    order = np.argsort(-probs, kind="stable")
    cdf = np.cumsum(probs[order], dtype=np.float64)
    keep = int(np.searchsorted(cdf, top_p * cdf[-1], side="left")) + 1
    return set(order[:keep].tolist())


def test_nucleus_matches_a_full_sort() -> None:
    rng = np.random.default_rng(0)
    for _ in range(300):
        vocab = int(rng.integers(2, 5000))
        logits = (rng.standard_normal(vocab) * rng.uniform(0.1, 12.0)).astype(np.float32)
        probs = np.exp(logits - logits.max()).astype(np.float32)
        top_p = float(rng.uniform(0.01, 0.999))
        candidates, weights = _nucleus(probs, top_p)
        assert set(candidates.tolist()) == brute_force_nucleus(probs, top_p)
        np.testing.assert_array_equal(weights, probs[candidates])


def test_sampler_is_reproducible_and_respects_temperature() -> None:
    logits = np.random.default_rng(1).standard_normal(1000).astype(np.float32) * 3
    draws = [Sampler(0.9, 0.95, seed=7).choose(logits) for _ in range(3)]
    assert len(set(draws)) == 1
    sampler = Sampler(1.0, 1.0, seed=3)
    seen = {sampler.choose(logits) for _ in range(200)}
    assert len(seen) > 10  # it samples
    cold = Sampler(1e-4, 1.0, seed=3)
    assert {cold.choose(logits) for _ in range(50)} == {int(np.argmax(logits))}
    assert Sampler(0.0, 1.0, seed=None).choose(logits) == int(np.argmax(logits))


def test_top_k_draws_only_from_the_k_most_likely_tokens() -> None:
    logits = np.random.default_rng(2).standard_normal(1000).astype(np.float32)
    best = set(np.argsort(-logits)[:3].tolist())
    sampler = Sampler(5.0, 1.0, seed=11, top_k=3)  # hot: without the cut it would roam the vocabulary
    assert {sampler.choose(logits) for _ in range(300)} == best
    assert {Sampler(5.0, 1.0, seed=11, top_k=1).choose(logits) for _ in range(20)} == {int(np.argmax(logits))}
    nucleus = Sampler(1.0, 1e-6, seed=11, top_k=50)  # top_p cuts the 50 down to the best one
    assert {nucleus.choose(logits) for _ in range(20)} == {int(np.argmax(logits))}
    samplers = [Sampler(1.0, 0.9, seed=5, top_k=20) for _ in range(2)]
    runs = [[sampler.choose(logits) for _ in range(30)] for sampler in samplers]
    assert runs[0] == runs[1]  # the same seed, the same tokens
    assert len(set(runs[0])) > 1


def test_any_integer_seed_is_taken() -> None:
    """numpy wants seeds in [0, 2**64): a negative or wider one maps into that range, reproducibly."""
    logits = np.random.default_rng(2).standard_normal(1000).astype(np.float32)
    for seed in (-1, -(2**63), 2**64 + 5, 2**100):
        draws = [Sampler(1.0, 1.0, seed=seed).choose(logits) for _ in range(2)]
        assert draws[0] == draws[1]
    assert Sampler(1.0, 1.0, seed=-1).choose(logits) == Sampler(1.0, 1.0, seed=2**64 - 1).choose(logits)


def test_a_vanishing_temperature_is_greedy_without_overflow() -> None:
    logits = np.random.default_rng(3).standard_normal(1000).astype(np.float32)
    with np.errstate(all="raise"):  # 1 / 1e-300 would overflow float32: no warning, no NaN
        for temperature in (1e-300, 5e-324, 1e-7):
            assert Sampler(temperature, 0.9, seed=1).choose(logits) == int(np.argmax(logits))
