"""Decision rules of an encoder router: from a request's embedding to a label and a confidence.

All of them read the same index of example embeddings (``nrt.hosting.embeddings.index``):

- ``centroid``: the label whose centroid is most similar; confidence is that cosine similarity.
- ``knn``: the label whose ``k`` most similar examples are, on average, the most similar;
  confidence is that mean similarity.
- ``margin``: the nearest centroid's label; confidence is how far its similarity is ahead
  of the second nearest centroid's (best minus second best).
- ``knn_centroid``: the label of the k-nearest-examples rule, with the centroid similarity
  of that label as confidence.

The router uses ``ROUTER_RULE`` (see the README's routing section and ``bench.routing``
for the comparison on a labelled set with out-of-scope requests).
"""

from __future__ import annotations

from typing import Literal, get_args

import numpy as np

from nrt.core.routing.scored import Scored
from nrt.hosting.embeddings.index import BoolArray, FloatArray, IntentIndex, unit_rows

Rule = Literal["centroid", "knn", "margin", "knn_centroid"]
RULES: tuple[Rule, ...] = get_args(Rule)
ROUTER_RULE: Rule = "centroid"
KNN = 3  # examples per label that the k-nearest rules average


def score(index: IntentIndex, query: FloatArray, rule: Rule = ROUTER_RULE, k: int = KNN) -> Scored:
    """The label ``rule`` picks for the embedding ``query``, every label's score, and the confidence."""
    check_rule(rule)
    vector = unit_rows(np.asarray(query, dtype=np.float32).reshape(1, -1))[0]
    centroid = index.centroids @ vector
    nearest = nearest_examples(index, index.examples @ vector, k) if uses_examples(rule) else centroid
    best, confidence = pick(rule, centroid, nearest, np.ones(len(index.labels), dtype=bool))
    per_label = nearest if uses_examples(rule) else centroid
    return Scored(
        scores={label: float(s) for label, s in zip(index.labels, per_label, strict=True)},
        best=index.labels[best],
        confidence=confidence,
    )


def check_rule(rule: str) -> None:
    if rule not in RULES:
        raise ValueError(f"unknown decision rule {rule!r}; valid: {', '.join(RULES)}")


def uses_examples(rule: Rule) -> bool:
    """Whether ``rule`` reads the individual examples (else only the centroids)."""
    return rule in ("knn", "knn_centroid")


def pick(rule: Rule, centroid: FloatArray, nearest: FloatArray, allowed: BoolArray) -> tuple[int, float]:
    """The label position ``rule`` picks among ``allowed`` labels, and its confidence in [0, 1].

    ``centroid``: each label's centroid similarity; ``nearest``: each label's mean similarity
    of its k nearest examples (ignored by the centroid-only rules).
    """
    per_label = np.where(allowed, nearest if uses_examples(rule) else centroid, -np.inf)
    best = int(np.argmax(per_label))
    if rule == "margin":
        others = np.delete(per_label, best)
        runner_up = float(others.max()) if np.isfinite(others).any() else 0.0
        confidence = float(per_label[best]) - runner_up
    elif rule == "knn_centroid":
        confidence = float(centroid[best])
    else:
        confidence = float(per_label[best])
    return best, min(1.0, max(0.0, confidence))


def nearest_examples(index: IntentIndex, similarities: FloatArray, k: int, skip: int | None = None) -> FloatArray:
    """Per label, the mean similarity of its ``k`` most similar examples (all if it has fewer);
    the example at position ``skip`` does not count. A label without examples scores -inf."""
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    out = np.full(len(index.labels), -np.inf, dtype=np.float32)
    counted = np.ones(len(index.owners), dtype=bool)
    if skip is not None:
        counted[skip] = False
    for position in range(len(index.labels)):
        mine = similarities[(index.owners == position) & counted]
        if len(mine):
            out[position] = (mine if len(mine) <= k else np.partition(mine, -k)[-k:]).mean()
    return out
