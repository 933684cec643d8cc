"""Key/value cache layouts: one sequence's cache, and a padded batch of them.

Tensors are ``OrtValue`` s on the model's device (see :mod:`nrt.adapters.inference.kv_tensors`). A batch
stores every layer's keys and values as ``[B, heads, width, head_dim]``. Row ``b`` holds
its ``lengths[b]`` valid positions right-aligned in columns ``[width - lengths[b], width)``;
the columns on the left are zero padding, hidden from attention by the mask. Each decode
step appends one column to every row, so the alignment survives from step to step without
copying.

A fused graph (GroupQueryAttention, :mod:`nrt.adapters.catalogue.builders.fused`) reads row ``b``'s
keys from column 0 up to ``lengths[b]`` (its sequence length is the mask's sum) and writes the
step's key at column ``lengths[b]``: its batch is *right*-padded (``right_padded``), valid
positions in ``[0, lengths[b])``; the step's output is again one column wider, each row one
position longer, so that alignment survives too. Rows join or leave only between steps, and only then is the batch rebuilt (and
trimmed to its longest row), on the device, by :class:`~nrt.adapters.inference.kv_tensors.DeviceOps`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from nrt.adapters.inference.kv_tensors import KV, DeviceOps, OrtValue, Piece, kv_nbytes
from nrt.adapters.inference.transcript import Transcript

IntArray = npt.NDArray[np.int64]


def width_of(past: Sequence[OrtValue]) -> int:
    """The number of positions (columns) a cache's tensors hold."""
    return int(past[0].shape()[2])


@dataclass(slots=True, eq=False)
class RowKV:
    """One sequence's cache without padding: tensors ``[1, heads, length, head_dim]``."""

    past: KV
    length: int


@dataclass(frozen=True, slots=True, eq=False)
class SessionKV:
    """A finished turn's cache kept for its session: the token ids it covers and the tensors
    (on the device), and (for a prompt given as text) the turn's transcript, whose ids start
    with ``tokens``."""

    tokens: tuple[int, ...]
    past: tuple[OrtValue, ...] = field(repr=False)
    transcript: Transcript | None = None

    @property
    def nbytes(self) -> int:
        return kv_nbytes(self.past)

    def prefix(self, length: int, ops: DeviceOps) -> RowKV:
        """The cache of the first ``length`` tokens."""
        return leading(self.past, length, ops)


def leading(past: Sequence[OrtValue], length: int, ops: DeviceOps) -> RowKV:
    """The cache of a lone row's first ``length`` positions (a causal cache truncates cleanly): the
    tensors themselves when that is all of them, else a copy of their first columns."""
    if length == width_of(past):
        return RowKV(list(past), length)
    return RowKV(ops.select(past, [0], 0, length), length)


@dataclass(slots=True, eq=False)
class BatchKV:
    """The padded cache of every row in the running batch (left-padded unless ``right_padded``)."""

    past: KV = field(default_factory=list)
    lengths: IntArray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    width: int = 0
    right_padded: bool = False

    @property
    def size(self) -> int:
        return int(self.lengths.shape[0])

    def attention_mask(self) -> IntArray:
        """Mask for a step that appends one column: ``[B, width + 1]``, ones on valid keys."""
        columns = np.arange(self.width + 1, dtype=np.int64)
        if self.right_padded:
            return (columns[None, :] <= self.lengths[:, None]).astype(np.int64)
        return (columns[None, :] >= (self.width - self.lengths)[:, None]).astype(np.int64)

    def advance(self, presents: KV) -> None:
        """After a decode step: the step's outputs become the cache, one column wider."""
        self.past = presents
        self.lengths = self.lengths + 1
        self.width += 1

    def row(self, index: int, ops: DeviceOps) -> tuple[OrtValue, ...]:
        """One row's valid cache, ``[1, heads, length, head_dim]`` per tensor: the batch's own
        tensors when it is that row alone, unpadded; else a copy, on the device."""
        length = int(self.lengths[index])
        if self.size == 1 and length == self.width:
            return tuple(self.past)
        start = 0 if self.right_padded else self.width - length
        return tuple(ops.select(self.past, [index], start, start + length))

    def rebuild(self, keep: Sequence[int], joiners: Sequence[RowKV], ops: DeviceOps) -> None:
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
        pieces: list[Piece] = []
        if keep and self.right_padded:  # the kept rows' first ``width`` columns hold all their valid positions
            pieces.append(Piece(self.past, keep, 0, min(width, self.width)))
        elif keep:  # the kept rows' last ``width`` columns hold all their valid positions
            pieces.append(Piece(self.past, keep, max(0, self.width - width), self.width))
        for row in joiners:
            end = width_of(row.past)
            start = 0 if self.right_padded else end - row.length
            pieces.append(Piece(row.past, [0], start, start + row.length))
        self.past, self.width = ops.assemble(pieces, width, right_padded=self.right_padded), width
        self.lengths = np.array(lengths, dtype=np.int64)
