"""Scoring a fixed set of labels for a text; only the labels given can ever be returned.

- Encoder models: the manifest's example utterances of each label are embedded once per
  (model, labels and examples) into an intent index, and the router's decision rule scores
  the text's embedding against it; the same index calibrates the router's confidence floor
  (``nrt.hosting.embeddings.calibration``) when it is built.
- Causal models: the log-likelihood of each label, and of "none of these", as the continuation
  of a classification prompt, computed with the KV cache of the prompt
  (``nrt.core.routing.likelihood``: the confidence is the best label's odds against none).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt

from nrt.adapters.inference import CausalLM, Encoder
from nrt.core.manifest import Manifest
from nrt.core.protocol import Calibration, ClassifyRequest
from nrt.core.routing import (
    NONE_LABEL,
    Scored,
    classification_prompt,
    examples_digest,
    intent_examples,
    likelihood_calibration,
    likelihood_scores,
    router_examples,
)
from nrt.hosting.embeddings.calibration import calibrate
from nrt.hosting.embeddings.index import IntentIndex, build_index
from nrt.hosting.embeddings.rules import score
from nrt.hosting.model_host import Runtime


class RouterIndex(msgspec.Struct, frozen=True):
    """An encoder router's example index and the floor it calibrated from it."""

    index: IntentIndex
    calibration: Calibration | None


class RouterIndexes:
    """Router indexes per (model, labels and examples), built once (thread-safe), and which
    calibrations have been announced."""

    def __init__(self) -> None:
        self._built: dict[tuple[str, str], RouterIndex] = {}
        self._announced: set[tuple[str, str, str]] = set()
        self._lock = threading.Lock()

    def get(
        self, model_id: str, encoder: Encoder, labels: Sequence[str], examples: Mapping[str, Sequence[str]]
    ) -> RouterIndex:
        """The index for these labels and examples (embedded and calibrated on first use)."""
        intents = intent_examples(labels, examples)
        digest = examples_digest(intents)
        key = (model_id, digest)
        with self._lock:  # one build per key, even when requests arrive together
            built = self._built.get(key)
            if built is None:
                index = build_index({label: encoder.embed(list(texts)) for label, texts in intents})
                built = RouterIndex(index=index, calibration=calibrate(index, digest=digest))
                self._built[key] = built
            return built

    def first_time(self, model_id: str, calibration: Calibration) -> bool:
        """True once per model and calibration: the time to record it."""
        key = (model_id, calibration.rule, calibration.digest)
        with self._lock:
            if key in self._announced:
                return False
            self._announced.add(key)
            return True

    def forget(self, model_id: str) -> None:
        """Drop ``model_id``'s indexes (its weights are gone; a reload may be another model)."""
        with self._lock:
            self._built = {key: value for key, value in self._built.items() if key[0] != model_id}
            self._announced = {key for key in self._announced if key[0] != model_id}


def calibration_at_load(
    routers: RouterIndexes, manifest: Manifest | None, model_id: str, runtime: Runtime
) -> Calibration | None:
    """The floor the manifest's entry model sets itself as it loads (None for any other model).

    An encoder embeds and calibrates the manifest's examples now, so that its first request
    finds them ready; a label-likelihood model has its fixed odds."""
    if manifest is None or manifest.routing.entry != model_id:
        return None
    intents = router_examples(manifest)
    if isinstance(runtime, Encoder):
        labels = tuple(label for label, _ in intents)
        return routers.get(model_id, runtime, labels, dict(intents)).calibration
    return likelihood_calibration(examples_digest(intents))


def likelihood_floor(request: ClassifyRequest) -> Calibration:
    """A label-likelihood router's floor for the labels (and examples) it was asked with."""
    return likelihood_calibration(examples_digest(intent_examples(request.labels, request.examples)))


def classify_with(
    model: Encoder | CausalLM, routers: RouterIndexes, request: ClassifyRequest, template: str | None = None
) -> tuple[Scored, Calibration | None]:
    """``request`` scored by an entry model, with the floor it calibrates to: an encoder's example
    index (built once, in ``routers``), or a causal model's label likelihoods (``template``: its prompt's)."""
    if isinstance(model, Encoder):
        router = routers.get(request.model_id, model, request.labels, request.examples)
        return classify_encoder(model, router, request.text), router.calibration
    return classify_causal(model, request.labels, request.text, template), likelihood_floor(request)


def classify_encoder(encoder: Encoder, router: RouterIndex, text: str) -> Scored:
    return score(router.index, encoder.embed([text])[0])


def classify_causal(model: CausalLM, labels: Sequence[str], text: str, template: str | None = None) -> Scored:
    """Sum of log-probabilities of each label's tokens (and of "none") after the prompt.

    One prefill of the prompt, shared; then one run over the prompt's cache that scores every
    option's tokens at once (the logits of position i predict token i+1): the options side by
    side in one batch when the model batches exactly and its graph extends several rows at once
    (padded on the right: a causal model's earlier positions never see the padding), else one run
    per option.
    """
    prompt_ids = model.encode(classification_prompt(labels, text, template))
    length = len(prompt_ids)
    ids = np.array([prompt_ids], dtype=np.int64)
    last, past = model.forward(ids, np.ones_like(ids), np.arange(length)[None, :], model.empty_past())
    options = [*labels, NONE_LABEL]
    tokens = [model.encode(" " + option, add_special_tokens=False) for option in options]
    followers = _followers(model, tokens, length, past)
    scores = []
    for option_tokens, rest in zip(tokens, followers, strict=True):
        predictions = np.concatenate([last[0][None, :], rest], axis=0)[: len(option_tokens)]
        shifted = predictions.astype(np.float64) - predictions.max(axis=1, keepdims=True)
        log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
        scores.append(float(log_probs[np.arange(len(option_tokens)), option_tokens].sum()))
    return likelihood_scores(dict(zip(labels, scores[:-1], strict=True)), scores[-1])


def _followers(
    model: CausalLM, tokens: Sequence[Sequence[int]], length: int, past: Sequence[npt.NDArray[Any]]
) -> list[npt.NDArray[Any]]:
    """For each option, the logits after each of its tokens but the last (``[len - 1, vocab]``),
    over the prompt's cache ``past`` of ``length`` positions."""
    width = max(len(t) for t in tokens) - 1
    vocab = model.spec.vocab_size
    if width == 0:
        return [np.zeros((0, vocab), dtype=np.float32) for _ in tokens]
    positions = np.arange(length, length + width)[None, :]
    if model.extends_rows_together and len(tokens) > 1:
        feed = np.array([[*t[:-1], *[0] * (width - len(t) + 1)] for t in tokens], dtype=np.int64)
        batch = len(tokens)
        shared = [np.repeat(a, batch, axis=0) for a in past]
        mask = np.ones((batch, length + width), dtype=np.int64)
        rest, _ = model.forward_sequence(feed, mask, np.repeat(positions, batch, axis=0), shared)
        return [rest[i, : len(t) - 1] for i, t in enumerate(tokens)]
    out = []
    for t in tokens:
        if len(t) == 1:
            out.append(np.zeros((0, vocab), dtype=np.float32))
            continue
        n = len(t) - 1
        feed = np.array([t[:-1]], dtype=np.int64)
        rest, _ = model.forward_sequence(feed, np.ones((1, length + n), dtype=np.int64), positions[:, :n], past)
        out.append(rest[0])
    return out
