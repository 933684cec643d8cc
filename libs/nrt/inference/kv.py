"""Key/value cache layouts: one sequence's cache, and a left-padded batch of them.

A batch stores every layer's keys and values as ``[B, heads, width, head_dim]``. Row ``b``
holds its ``lengths[b]`` valid positions right-aligned in columns
``[width - lengths[b], width)``; the columns on the left are zero padding, hidden from
attention by the mask. Each decode step appends one column to every row, so the
alignment survives from step to step without copying. Rows join or leave only between
steps, and only then is the batch rebuilt (and trimmed to its longest row).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from nrt.inference.transcript import Transcript

IntArray = npt.NDArray[np.int64]


@dataclass(slots=True, eq=False)
class RowKV:
    """One sequence's cache without padding: arrays ``[1, heads, length, head_dim]``."""

    past: list[np.ndarray]
    length: int


@dataclass(frozen=True, slots=True, eq=False)
class SessionKV:
    """A finished turn's cache kept for its session: the token ids it covers and the arrays,
    and (for a prompt given as text) the turn's transcript, whose ids start with ``tokens``."""

    tokens: tuple[int, ...]
    past: tuple[np.ndarray, ...] = field(repr=False)
    transcript: Transcript | None = None

    @property
    def nbytes(self) -> int:
        return sum(int(a.nbytes) for a in self.past)

    def prefix(self, length: int) -> RowKV:
        """The cache of the first ``length`` tokens (a causal cache truncates cleanly)."""
        return RowKV([np.ascontiguousarray(a[:, :, :length, :]) for a in self.past], length)


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


@dataclass(slots=True, eq=False)
class BatchKV:
    """The left-padded cache of every row in the running batch."""

    past: list[np.ndarray] = field(default_factory=list)
    lengths: IntArray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    width: int = 0

    @property
    def size(self) -> int:
        return int(self.lengths.shape[0])

    def attention_mask(self) -> IntArray:
        """Mask for a step that appends one column: ``[B, width + 1]``, ones on valid keys."""
        columns = np.arange(self.width + 1, dtype=np.int64)
        return (columns[None, :] >= (self.width - self.lengths)[:, None]).astype(np.int64)

    def advance(self, presents: list[np.ndarray]) -> None:
        """After a decode step: the step's outputs become the cache, one column wider."""
        self.past = presents
        self.lengths = self.lengths + 1
        self.width += 1

    def row(self, index: int) -> tuple[np.ndarray, ...]:
        """A copy of one row's valid cache, ``[1, heads, length, head_dim]`` per tensor."""
        length = int(self.lengths[index])
        start = self.width - length
        return tuple(np.ascontiguousarray(a[index : index + 1, :, start:, :]) for a in self.past)

    def rows(self, indices: Sequence[int]) -> list[tuple[np.ndarray, ...]]:
        """Copies of several rows' caches, converting the batch to numpy once."""
        if not indices:
            return []
        arrays = self.past
        out: list[tuple[np.ndarray, ...]] = []
        for index in indices:
            start = self.width - int(self.lengths[index])
            out.append(tuple(np.ascontiguousarray(a[index : index + 1, :, start:, :]) for a in arrays))
        return out

    def rebuild(self, keep: Sequence[int], joiners: Sequence[RowKV]) -> None:
        """Keep rows ``keep`` (in that order), then append ``joiners``; re-pad to the longest."""
        lengths = [int(self.lengths[i]) for i in keep] + [r.length for r in joiners]
        if not lengths:
            self.past, self.lengths, self.width = [], np.zeros(0, dtype=np.int64), 0
            return
        if not keep and len(joiners) == 1:  # a lone row needs no padding: adopt it as is
            self.past, self.width = list(joiners[0].past), joiners[0].length
            self.lengths = np.array([joiners[0].length], dtype=np.int64)
            return
        width = max(lengths)
        old = self.past if keep else []
        new_rows = [r.past for r in joiners]
        template = old[0] if old else new_rows[0][0]
        tensors = len(old) if old else len(new_rows[0])
        rebuilt: list[np.ndarray] = []
        for t in range(tensors):
            shape = (len(lengths), template.shape[1], width, template.shape[3])
            out = np.zeros(shape, dtype=template.dtype)
            for j, i in enumerate(keep):
                n = lengths[j]
                out[j, :, width - n :, :] = old[t][i, :, self.width - n :, :]
            for k, row in enumerate(new_rows):
                j = len(keep) + k
                n = lengths[j]
                out[j, :, width - n :, :] = row[t][0, :, row[t].shape[2] - n :, :]
            rebuilt.append(out)
        self.past, self.width = rebuilt, width
        self.lengths = np.array(lengths, dtype=np.int64)
