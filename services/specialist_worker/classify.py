"""Scoring a fixed set of labels for a text; only the labels given can ever be returned.

- Encoder models: cosine similarity of the text's embedding to each label's centroid
  (the normalized mean of its example utterances, or of the label itself without examples).
- Causal models: the log-likelihood of each label as the continuation of a classification
  prompt, computed with the KV cache of the prompt; confidence is the softmax over labels.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

import msgspec
import numpy as np
import numpy.typing as npt

from nrt.inference import CausalLM, Encoder

FloatArray = npt.NDArray[np.float32]

DEFAULT_PROMPT = "Classify the request into one of these categories: {labels}.\nRequest: {text}\nCategory:"


class LabelScores(msgspec.Struct, frozen=True, kw_only=True):
    scores: dict[str, float]
    best: str
    confidence: float


def _pick(labels: Sequence[str], scores: Sequence[float], confidence: float) -> LabelScores:
    best = int(np.argmax(scores))
    return LabelScores(
        scores={label: float(s) for label, s in zip(labels, scores, strict=True)},
        best=labels[best],
        confidence=float(min(1.0, max(0.0, confidence))),
    )


class CentroidCache:
    """Label centroids per (model, examples), computed once."""

    def __init__(self) -> None:
        self._cache: dict[str, FloatArray] = {}

    def centroids(
        self, model_id: str, encoder: Encoder, labels: Sequence[str], examples: Mapping[str, Sequence[str]]
    ) -> FloatArray:
        texts = [tuple(examples.get(label) or (label,)) for label in labels]
        key = model_id + hashlib.sha256(msgspec.json.encode([labels, texts])).hexdigest()
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        rows = []
        for group in texts:
            mean = encoder.embed(list(group)).mean(axis=0)
            rows.append(mean / max(float(np.linalg.norm(mean)), 1e-12))
        centroids = np.stack(rows).astype(np.float32)
        self._cache[key] = centroids
        return centroids


def classify_encoder(encoder: Encoder, centroids: FloatArray, labels: Sequence[str], text: str) -> LabelScores:
    vector = encoder.embed([text])[0]
    similarities = centroids @ vector
    return _pick(labels, similarities.tolist(), float(similarities.max()))


def classify_causal(model: CausalLM, labels: Sequence[str], text: str, prompt: str = DEFAULT_PROMPT) -> LabelScores:
    """Sum of log-probabilities of each label's tokens after the prompt.

    One prefill of the prompt, shared; then one run per label over the prompt's cache that
    scores all of the label's tokens at once (the logits of position i predict token i+1).
    """
    rendered = prompt.replace("{labels}", ", ".join(labels)).replace("{text}", text)
    prompt_ids = model.encode(rendered)
    length = len(prompt_ids)
    ids = np.array([prompt_ids], dtype=np.int64)
    last, past = model.forward(ids, np.ones_like(ids), np.arange(length)[None, :], model.empty_past())
    scores = []
    for label in labels:
        tokens = model.encode(" " + label, add_special_tokens=False)
        predictions = last[0][None, :]
        if len(tokens) > 1:
            feed = np.array([tokens[:-1]], dtype=np.int64)
            positions = np.arange(length, length + len(tokens) - 1)[None, :]
            rest, _ = model.forward_sequence(
                feed, np.ones((1, length + len(tokens) - 1), dtype=np.int64), positions, past
            )
            predictions = np.concatenate([predictions, rest[0]], axis=0)
        shifted = predictions.astype(np.float64) - predictions.max(axis=1, keepdims=True)
        log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
        scores.append(float(log_probs[np.arange(len(tokens)), tokens].sum()))
    values = np.array(scores, dtype=np.float64)
    probabilities = np.exp(values - values.max())
    probabilities /= probabilities.sum()
    return _pick(labels, scores, float(probabilities.max()))
