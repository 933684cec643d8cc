"""Pick the next token from logits: greedy, or temperature + top-k + nucleus (top-p) sampling.

Sampling is reproducible per request: each sampled request owns a ``numpy`` generator
seeded from its ``seed`` and draws exactly one uniform number per token, so the same
request yields the same tokens whether it runs alone or batched with others.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

# Probability cut-offs (relative to the most likely token) tried before sorting the whole
# vocabulary: the nucleus lies inside {p >= cutoff} whenever that set already holds top_p of
# the mass, because every token left out is less likely than every token kept.
_CUTOFFS = (1e-2, 1e-4, 1e-6)
# Below this temperature, sampling is greedy: 1 / temperature would overflow float32 further down
# (at about 3e-39), and long before that the most likely token takes all the mass anyway.
GREEDY_BELOW = 1e-6


class Sampler:
    """Per-request token choice. ``temperature < GREEDY_BELOW`` (0 included) means greedy."""

    __slots__ = ("_rng", "greedy", "temperature", "top_k", "top_p")

    def __init__(self, temperature: float, top_p: float, seed: int | None, top_k: int = 0) -> None:
        self.temperature = float(temperature)
        self.top_p = float(top_p)
        self.top_k = max(0, int(top_k))  # 0: no top-k cut
        self.greedy = self.temperature < GREEDY_BELOW
        # numpy takes seeds in [0, 2**64): any other integer maps into it (the gateway sends 0 .. 2**63 - 1)
        self._rng = np.random.default_rng(None if seed is None else seed % 2**64)

    def choose(self, logits: npt.NDArray[np.floating]) -> int:
        """The next token for one row of logits (shape ``[vocab]``)."""
        if self.greedy:
            return int(np.argmax(logits))
        probs = logits.astype(np.float32)  # a copy: scaled and exponentiated in place
        probs -= probs.max()
        probs *= np.float32(1.0 / self.temperature)
        np.exp(probs, out=probs)  # unnormalized, the most likely token at 1.0
        if 0 < self.top_k < probs.shape[0]:
            candidates, weights = _top_k(probs, self.top_k, self.top_p)
            return _draw(candidates, weights, self._rng.random())
        if self.top_p >= 1.0:
            cdf = np.cumsum(probs, dtype=np.float64)
            index = int(np.searchsorted(cdf, self._rng.random() * float(cdf[-1]), side="right"))
            return min(index, int(probs.shape[0]) - 1)
        candidates, weights = _nucleus(probs, self.top_p)
        return _draw(candidates, weights, self._rng.random())


def _draw(candidates: npt.NDArray[np.intp], weights: npt.NDArray[np.float32], uniform: float) -> int:
    cdf = np.cumsum(weights, dtype=np.float64)
    index = int(np.searchsorted(cdf, uniform * float(cdf[-1]), side="right"))
    return int(candidates[min(index, len(candidates) - 1)])


def _top_k(
    probs: npt.NDArray[np.float32], k: int, top_p: float
) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.float32]]:
    """The ``k`` most probable tokens, most probable first, cut further to the nucleus holding
    ``top_p`` of their mass."""
    candidates = np.argpartition(probs, -k)[-k:]
    weights = probs[candidates]
    order = np.argsort(-weights, kind="stable")
    candidates, weights = candidates[order], weights[order]
    if top_p < 1.0:
        cdf = np.cumsum(weights, dtype=np.float64)
        keep = min(int(np.searchsorted(cdf, top_p * float(cdf[-1]), side="left")) + 1, len(candidates))
        candidates, weights = candidates[:keep], weights[:keep]
    return candidates, weights


def _nucleus(probs: npt.NDArray[np.float32], top_p: float) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.float32]]:
    """The smallest set of most-probable tokens holding ``top_p`` of the mass (exact),
    without sorting the whole vocabulary (262k entries for Gemma) in the usual case."""
    need = top_p * float(probs.sum(dtype=np.float64))
    candidates = np.arange(probs.shape[0])
    for cutoff in _CUTOFFS:
        kept = np.flatnonzero(probs >= cutoff)
        if float(probs[kept].sum(dtype=np.float64)) >= need:
            candidates = kept
            break
    weights = probs[candidates]
    order = np.argsort(-weights, kind="stable")
    candidates, weights = candidates[order], weights[order]
    cdf = np.cumsum(weights, dtype=np.float64)
    keep = min(int(np.searchsorted(cdf, need, side="left")) + 1, len(candidates))
    return candidates[:keep], weights[:keep]
