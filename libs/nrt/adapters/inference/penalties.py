"""OpenAI's logit adjustments for one request: ``logit_bias`` and the presence / frequency penalties.

Applied to a row's logits before the response format's mask and the sampler, per request, so a
batch mixes rows with and without them. Cheap: numpy on the row, no Python loop over the
vocabulary; the penalties touch only the distinct tokens generated so far in the request (not the
prompt), as OpenAI defines them::

    logit[j] -= frequency_penalty * count[j] + presence_penalty * (count[j] > 0)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from nrt.adapters.inference.errors import LogitBiasError


class LogitAdjustments:
    """The bias and penalties of one request, and the counts of the tokens it has generated."""

    __slots__ = ("_bias_ids", "_bias_values", "_counts", "frequency", "presence")

    def __init__(self, logit_bias: Sequence[tuple[int, float]], presence: float, frequency: float) -> None:
        self._bias_ids = np.array([token for token, _ in logit_bias], dtype=np.intp)
        self._bias_values = np.array([bias for _, bias in logit_bias], dtype=np.float32)
        self.presence = float(presence)
        self.frequency = float(frequency)
        self._counts: dict[int, int] = {}

    @property
    def active(self) -> bool:
        return bool(self._bias_ids.size) or self.presence != 0.0 or self.frequency != 0.0

    def check(self, vocab_size: int) -> None:
        """A :class:`LogitBiasError` naming the first bias id the model has no token for."""
        for token in self._bias_ids.tolist():
            if not 0 <= token < vocab_size:
                raise LogitBiasError(
                    f"logit_bias names token {token}, but this model's vocabulary holds ids 0 to {vocab_size - 1}"
                )

    def record(self, token: int) -> None:
        """One more generated token (the penalties count it from the next step on)."""
        if self.presence != 0.0 or self.frequency != 0.0:
            self._counts[token] = self._counts.get(token, 0) + 1

    def apply(self, logits: npt.NDArray[np.floating]) -> npt.NDArray[np.float32]:
        """A float32 copy of one row of logits (shape ``[vocab]``), biased and penalized."""
        out = logits.astype(np.float32, copy=True)
        if self._bias_ids.size:
            out[self._bias_ids] += self._bias_values
        if self._counts:
            ids = np.fromiter(self._counts.keys(), dtype=np.intp, count=len(self._counts))
            counts = np.fromiter(self._counts.values(), dtype=np.float32, count=len(self._counts))
            out[ids] -= np.float32(self.frequency) * counts + np.float32(self.presence)
        return out
