"""The label-likelihood router: a causal model scores each label as the continuation of a
classification prompt, and "none of these" as one more option.

The prompt lists the manifest's labels and then "none of these"; the model's log-likelihood
of each label, and of ``NONE_LABEL``, after it are the scores. The best label's confidence is
how it fares against "none of these" alone: P(best) / (P(best) + P(none)). A request whose
best label is not clearly more likely than "none of these" goes to the fallback: unless the
manifest sets a threshold, "clearly" means ``NONE_ODDS`` times as likely (a floor of 2/3).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from nrt.core.protocol import Calibration
from nrt.core.routing.scored import Scored

NONE_LABEL = "none"
NONE_OPTION = "none of these"  # how the prompt lists it; the model is scored on NONE_LABEL
NONE_ODDS = 2.0
DEFAULT_PROMPT = "Classify the request into one of these categories: {labels}.\nRequest: {text}\nCategory:"


def classification_prompt(labels: Sequence[str], text: str, template: str | None = None) -> str:
    """``template`` (it must have ``{labels}`` and ``{text}``), else ``DEFAULT_PROMPT``, filled in.

    A router's ``template`` without those placeholders is its answer template (for when it
    answers itself), not a classification prompt, so the default is used then.
    """
    prompt = template if template and "{labels}" in template and "{text}" in template else DEFAULT_PROMPT
    listed = ", ".join([*labels, NONE_OPTION])
    return prompt.replace("{labels}", listed).replace("{text}", text)


def likelihood_scores(log_likelihoods: Mapping[str, float], none: float) -> Scored:
    """The most likely label (ties: the first) and its confidence against "none of these"."""
    if not log_likelihoods:
        return Scored(scores={}, best=None, confidence=0.0)
    best = max(log_likelihoods, key=lambda label: log_likelihoods[label])
    lead = log_likelihoods[best] - none
    confidence = 1.0 / (1.0 + math.exp(-lead)) if lead > -700 else 0.0
    return Scored(scores=dict(log_likelihoods), best=best, confidence=confidence)


def likelihood_calibration(digest: str = "") -> Calibration:
    """The floor of a label-likelihood router: its best label ``NONE_ODDS`` times as likely as none."""
    return Calibration(threshold=round(NONE_ODDS / (1.0 + NONE_ODDS), 4), rule="likelihood", examples=0, digest=digest)
