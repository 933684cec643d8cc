"""From the entry model's label scores to the model that answers, under one manifest."""

from __future__ import annotations

import math
from typing import Literal

import msgspec

from nrt.core.manifest import Manifest
from nrt.core.protocol import Calibration, ClassifyReply, ClassifyRequest
from nrt.core.routing.scored import Scored
from nrt.core.routing.threshold import Threshold, ThresholdSource, threshold_in_force

ModelCall = Literal["routed", "direct"]

__all__ = ["Decision", "ModelCall", "Scored", "choose_route", "classify_request", "resolve_model", "restrict"]


class Decision(msgspec.Struct, frozen=True, kw_only=True):
    """What the router decided for one request, and the rule that decided it."""

    entry: str  # the entry model that classified
    intent: str | None  # the chosen label; None when none was confident enough
    target: str  # the model that answers
    scores: dict[str, float]
    confidence: float
    threshold: float
    threshold_source: ThresholdSource  # where ``threshold`` comes from: manifest | calibrated | none
    rule: str  # the dispatch rule and how it resolved, for people and the event log


def resolve_model(manifest: Manifest, model: str) -> ModelCall | None:
    """``routed`` for the entry model, ``direct`` for any other declared model, else None."""
    if model == manifest.routing.entry:
        return "routed"
    if model in manifest.model_ids:
        return "direct"
    return None


def classify_request(manifest: Manifest, request_id: str, text: str) -> ClassifyRequest:
    """Ask the entry model to score exactly the manifest's labels (with their examples, if any)."""
    entry = manifest.model(manifest.routing.entry)
    return ClassifyRequest(
        request_id=request_id,
        model_id=entry.id,
        text=text,
        labels=manifest.intent_labels,
        examples={label: examples for label, examples in entry.intents if examples},
    )


def restrict(reply: ClassifyReply, labels: tuple[str, ...]) -> Scored:
    """Keep the scores of ``labels`` only; the best is always one of them.

    The model's own confidence is trusted only when its best label is an allowed one
    that has the top allowed score; otherwise the reply named (or preferred) a label
    outside the manifest, and the result gets confidence 0 so that any threshold sends
    the request to the fallback.
    """
    scores = {label: float(reply.scores[label]) for label in labels if _finite(reply.scores.get(label))}
    if not scores:
        return Scored(scores={}, best=None, confidence=0.0)
    top = max(scores.values())
    if reply.best in scores and scores[reply.best] >= top:
        return Scored(scores=scores, best=reply.best, confidence=_unit(reply.confidence))
    best = next(label for label in labels if scores.get(label) == top)  # ties: manifest order
    return Scored(scores=scores, best=best, confidence=0.0)


def choose_route(manifest: Manifest, scored: Scored, calibration: Calibration | None = None) -> Decision:
    """Apply the confidence threshold and the dispatch rule to ``scored``.

    The threshold is the entry model's ``confidence_threshold``, else the ``calibration``
    the router model sent with its scores (see ``threshold_in_force``). A label below it
    is no intent at all. The rule then picks the target: a fixed route's specialist, else
    the specialist named by the intent, else the fallback if declared, else the entry model.
    """
    entry = manifest.model(manifest.routing.entry)
    threshold = threshold_in_force(manifest, calibration)
    confident = scored.best is not None and scored.confidence >= threshold.value
    intent = scored.best if confident else None
    target = manifest.dispatch_target(intent)
    return Decision(
        entry=entry.id,
        intent=intent,
        target=target,
        scores=scored.scores,
        confidence=scored.confidence,
        threshold=threshold.value,
        threshold_source=threshold.source,
        rule=_explain(manifest, scored, intent, target, threshold),
    )


def _explain(manifest: Manifest, scored: Scored, intent: str | None, target: str, threshold: Threshold) -> str:
    rule = manifest.routing.dispatch_rule
    text = f"{rule.render()} => {target}"
    if rule.fixed_target is not None:
        return f"{text} (fixed route)"
    if intent is not None and target == intent:
        return text
    answerer = "fallback" if manifest.fallback is not None and target == manifest.fallback.id else "entry model"
    if scored.best is None:
        why = "no allowed label was scored"
    elif intent is None:
        which = "the calibrated threshold" if threshold.source == "calibrated" else "the threshold"
        why = f"'{scored.best}' confidence {scored.confidence:.2f} is below {which} {threshold.value:.2f}"
    else:
        why = f"no specialist serves intent '{intent}'"
    return f"{text} ({answerer}: {why})"


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def _unit(value: float) -> float:
    return min(1.0, max(0.0, value)) if math.isfinite(value) else 0.0
