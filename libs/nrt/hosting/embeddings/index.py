"""The example embeddings of an encoder router, grouped by label, with each label's centroid.

Rows are unit vectors, so a dot product is a cosine similarity. A label's centroid is the
normalized mean of its examples. ``without`` gives the index minus some examples (a label
left without any disappears): what leave-one-out calibration scores against.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec
import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float32]
IntArray = npt.NDArray[np.intp]
BoolArray = npt.NDArray[np.bool_]


class IntentIndex(msgspec.Struct, frozen=True):
    labels: tuple[str, ...]
    examples: FloatArray  # [n, dim], unit rows
    owners: IntArray  # [n]: the position in ``labels`` of each example's label
    centroids: FloatArray  # [len(labels), dim], unit rows

    @property
    def counts(self) -> IntArray:
        """How many examples each label has."""
        counts: IntArray = np.bincount(self.owners, minlength=len(self.labels))
        return counts

    def without(self, dropped: BoolArray) -> IntentIndex:
        """The index without the examples where ``dropped`` is True; labels left empty go too."""
        kept = ~dropped
        remaining = np.unique(self.owners[kept])
        renumber = np.full(len(self.labels), -1, dtype=np.intp)
        renumber[remaining] = np.arange(len(remaining))
        labels = tuple(self.labels[i] for i in remaining)
        return _assemble(labels, self.examples[kept], renumber[self.owners[kept]])


def unit_rows(rows: FloatArray) -> FloatArray:
    """``rows`` scaled to length 1 (a zero row stays zero)."""
    norms = np.linalg.norm(rows, axis=-1, keepdims=True)
    out: FloatArray = (rows / np.maximum(norms, 1e-12)).astype(np.float32)
    return out


def build_index(examples: Mapping[str, FloatArray]) -> IntentIndex:
    """An index from each label's example embeddings (``[n, dim]`` each, n >= 1), in mapping order."""
    if not examples:
        raise ValueError("an intent index needs at least one label with examples")
    labels = tuple(examples)
    blocks, owners = [], []
    for position, label in enumerate(labels):
        vectors = np.asarray(examples[label], dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[0] == 0:
            raise ValueError(f"label {label!r} needs at least one example embedding, got shape {vectors.shape}")
        blocks.append(unit_rows(vectors))
        owners.append(np.full(vectors.shape[0], position, dtype=np.intp))
    dims = {block.shape[1] for block in blocks}
    if len(dims) != 1:
        raise ValueError(f"example embeddings of different sizes: {sorted(dims)}")
    return _assemble(labels, np.concatenate(blocks), np.concatenate(owners))


def _assemble(labels: tuple[str, ...], examples: FloatArray, owners: IntArray) -> IntentIndex:
    sums = np.zeros((len(labels), examples.shape[1]), dtype=np.float32)
    np.add.at(sums, owners, examples)
    return IntentIndex(labels=labels, examples=examples, owners=owners, centroids=unit_rows(sums))
