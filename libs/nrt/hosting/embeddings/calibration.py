"""The confidence floor an encoder router derives from its own labelled examples.

Leave-one-out over the examples, scored with the router's decision rule:

- ``own``: each example scored against the index without that one example (its intent
  still there): how sure the router is of a request of a known intent it has not seen.
- ``other``: each example scored against the index without its whole intent: how sure the
  router is of a request whose intent it does not have, the out-of-scope case. These are
  near misses (utterances of the same kind of traffic), harder than most out-of-scope requests.

The floor sits ``FLOOR_POSITION`` of the way from the mean ``other`` up to the mean ``own``
confidence. Held-out in-scope requests spread widely below their mean, so the floor stays
near the ``other`` side: it rejects what looks no more like a known intent than an unknown
intent's utterance does, and keeps nearly every in-scope request. Being a position between
two measured means, not a similarity value, it carries across encoders and sets of intents
(``bench.routing`` measures it against fixed thresholds on held-out sets).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from nrt.core.protocol import Calibration
from nrt.hosting.embeddings.index import FloatArray, IntentIndex
from nrt.hosting.embeddings.rules import KNN, ROUTER_RULE, Rule, check_rule, nearest_examples, pick, uses_examples

FLOOR_POSITION = 0.15


def calibrate(index: IntentIndex, rule: Rule = ROUTER_RULE, digest: str = "", k: int = KNN) -> Calibration | None:
    """The floor for ``rule`` on ``index``; None when leave-one-out has nothing to compare (a
    single label, or no label with two examples), and the router then keeps every best label."""
    check_rule(rule)
    counts = index.counts
    if not calibratable(counts.tolist()):
        return None
    own, other = [], []
    similarities = index.examples @ index.examples.T  # [n, n]
    centroids = index.examples @ index.centroids.T  # [n, labels]
    sums = np.zeros_like(index.centroids)
    np.add.at(sums, index.owners, index.examples)  # unnormalized: a centroid without one example is cheap
    everyone = np.ones(len(index.labels), dtype=bool)
    for j, label in enumerate(index.owners):
        nearest = nearest_examples(index, similarities[j], k, skip=j) if uses_examples(rule) else centroids[j]
        if counts[label] >= 2:
            held_out = centroids[j].copy()
            held_out[label] = _cosine(sums[label] - index.examples[j], index.examples[j])
            own.append(pick(rule, held_out, nearest, everyone)[1])
        others = everyone.copy()
        others[label] = False
        other.append(pick(rule, centroids[j], nearest, others)[1])
    own_mean, other_mean = float(np.mean(own)), float(np.mean(other))
    threshold = other_mean + FLOOR_POSITION * (own_mean - other_mean)
    return Calibration(
        threshold=round(min(1.0, max(0.0, threshold)), 4),
        rule=rule,
        examples=len(index.owners),
        own=round(own_mean, 4),
        other=round(other_mean, 4),
        digest=digest,
    )


def calibratable(counts: Sequence[int]) -> bool:
    """Whether labels with these example counts can calibrate: two labels, one with two examples."""
    return len(counts) >= 2 and max(counts) >= 2


def _cosine(a: FloatArray, b: FloatArray) -> float:
    return float(a @ b) / max(float(np.linalg.norm(a) * np.linalg.norm(b)), 1e-12)
