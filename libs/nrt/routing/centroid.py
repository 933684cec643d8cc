"""Nearest-centroid classification over normalized sentence embeddings.

Each label's centroid is the normalized mean of its example embeddings; a text's score
for a label is the cosine similarity of its embedding with that centroid. The
confidence is the best score clipped to [0, 1]: on a sentence encoder, related texts
score well above unrelated ones, so a manifest's ``confidence_threshold`` is a cosine
floor below which no label is trusted.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec
import numpy as np
import numpy.typing as npt

from nrt.routing.decision import Scored

FloatArray = npt.NDArray[np.float32]


class CentroidIndex(msgspec.Struct, frozen=True):
    labels: tuple[str, ...]
    matrix: FloatArray  # [len(labels), dim], unit rows


def _normalized(rows: FloatArray) -> FloatArray:
    norms = np.linalg.norm(rows, axis=-1, keepdims=True)
    out: FloatArray = (rows / np.maximum(norms, 1e-12)).astype(np.float32)
    return out


def build_index(examples: Mapping[str, FloatArray]) -> CentroidIndex:
    """One centroid per label from its example embeddings (``[n, dim]`` each, n >= 1)."""
    if not examples:
        raise ValueError("a centroid index needs at least one label with examples")
    labels = tuple(examples)
    rows = []
    for label in labels:
        vectors = np.asarray(examples[label], dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[0] == 0:
            raise ValueError(f"label {label!r} needs at least one example embedding")
        rows.append(_normalized(vectors).mean(axis=0))
    return CentroidIndex(labels, _normalized(np.stack(rows)))


def nearest(index: CentroidIndex, query: FloatArray) -> Scored:
    """Cosine scores of ``query`` against every centroid; the best label and its confidence."""
    vector = _normalized(np.asarray(query, dtype=np.float32).reshape(1, -1))[0]
    similarities = index.matrix @ vector
    scores = {label: float(s) for label, s in zip(index.labels, similarities, strict=True)}
    best = index.labels[int(np.argmax(similarities))]
    return Scored(scores=scores, best=best, confidence=min(1.0, max(0.0, scores[best])))
