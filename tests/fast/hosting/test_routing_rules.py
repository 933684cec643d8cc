"""The encoder router's decision rules, its leave-one-out floor, the label-likelihood router's
"none of these" rule, and which threshold is in force: pure functions, no model, no server."""

from __future__ import annotations

import math

import msgspec
import numpy as np
import pytest

from nrt.core.events import RouterCalibrated, TierChanged, decode, encode
from nrt.core.manifest import parse_manifest
from nrt.core.protocol import Calibration
from nrt.core.routing import (
    Scored,
    choose_route,
    classification_prompt,
    classify_request,
    examples_digest,
    intent_examples,
    likelihood_calibration,
    likelihood_scores,
    router_examples,
    threshold_in_force,
)
from nrt.core.state import fold
from nrt.hosting.embeddings.calibration import FLOOR_POSITION, calibrate
from nrt.hosting.embeddings.index import IntentIndex, build_index
from nrt.hosting.embeddings.rules import RULES, Rule, score

DIM = 32


def clusters(seed: int = 0, labels: int = 4, per_label: int = 10) -> dict[str, np.ndarray]:
    """Example embeddings as a sentence encoder gives them: every intent shares the direction of
    its domain (so intents are related), each has its own direction too, and each example varies."""
    rng = np.random.default_rng(seed)
    domain = rng.normal(size=DIM)
    return {
        f"intent{i}": (domain + rng.normal(size=DIM) + 0.5 * rng.normal(size=(per_label, DIM))).astype(np.float32)
        for i in range(labels)
    }


def leave_one_out(index: IntentIndex, rule: Rule) -> tuple[float, float]:
    """The calibration's two means, computed the slow, obvious way: rebuild the index without
    the example (own) or without its intent (other) and score the example against it."""
    own, other = [], []
    everyone = np.arange(len(index.owners))
    for j, example in enumerate(index.examples):
        label = index.owners[j]
        if index.counts[label] >= 2:
            own.append(score(index.without(everyone == j), example, rule).confidence)
        other.append(score(index.without(index.owners == label), example, rule).confidence)
    return float(np.mean(own)), float(np.mean(other))


@pytest.mark.parametrize("rule", RULES)
def test_the_calibration_is_leave_one_out_over_the_examples(rule: Rule) -> None:
    index = build_index(clusters())
    calibration = calibrate(index, rule, digest="d")
    assert calibration is not None
    own, other = leave_one_out(index, rule)
    assert calibration.own == pytest.approx(own, abs=1e-4)
    assert calibration.other == pytest.approx(other, abs=1e-4)
    assert calibration.threshold == pytest.approx(other + FLOOR_POSITION * (own - other), abs=2e-4)
    assert (calibration.rule, calibration.examples, calibration.digest) == (rule, 40, "d")


def test_the_floor_keeps_held_out_in_scope_vectors_and_rejects_unrelated_ones() -> None:
    rng = np.random.default_rng(1)
    everything = clusters(seed=1, per_label=30)  # 10 examples and 20 held out per intent
    examples = {label: vectors[:10] for label, vectors in everything.items()}
    index = build_index(examples)
    calibration = calibrate(index)
    assert calibration is not None
    assert calibration.other < calibration.threshold < calibration.own
    kept = [
        score(index, v).best == label and score(index, v).confidence >= calibration.threshold
        for label, vectors in everything.items()
        for v in vectors[10:]
    ]
    unrelated = rng.normal(size=(100, DIM)).astype(np.float32)  # out of the domain altogether
    rejected = [score(index, v).confidence < calibration.threshold for v in unrelated]
    assert np.mean(kept) >= 0.95
    assert np.mean(rejected) >= 0.95


def test_no_calibration_without_something_to_compare() -> None:
    one_label = build_index({"only": clusters()["intent0"]})
    single_examples = build_index({label: vectors[:1] for label, vectors in clusters().items()})
    assert calibrate(one_label) is None
    assert calibrate(single_examples) is None


def test_each_rule_picks_and_scores_as_documented() -> None:
    e = np.eye(4, dtype=np.float32)
    index = build_index({"a": np.stack([e[0], e[0] + 0.2 * e[1]]), "b": np.stack([e[1], e[2]]), "c": e[3][None, :]})
    query = e[0] + 0.5 * e[1]
    centroid = score(index, query, "centroid")
    assert centroid.best == "a"
    assert centroid.confidence == pytest.approx(centroid.scores["a"])
    margin = score(index, query, "margin")
    assert margin.best == "a"
    assert margin.confidence == pytest.approx(centroid.scores["a"] - centroid.scores["b"])
    knn = score(index, query, "knn", k=1)  # one nearest example per label
    unit = query / np.linalg.norm(query)
    assert knn.scores["b"] == pytest.approx(float(unit @ e[1]))
    assert knn.confidence == pytest.approx(max(knn.scores.values()))
    mixed = score(index, query, "knn_centroid", k=1)
    assert mixed.best == knn.best
    assert mixed.confidence == pytest.approx(centroid.scores[knn.best])
    with pytest.raises(ValueError, match="unknown decision rule 'vote'; valid: centroid, knn, margin, knn_centroid"):
        score(index, query, "vote")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="k must be at least 1"):
        score(index, query, "knn", k=0)


def test_an_index_rejects_empty_or_mismatched_examples() -> None:
    with pytest.raises(ValueError, match="label 'a' needs at least one example embedding"):
        build_index({"a": np.zeros((0, 4), dtype=np.float32)})
    with pytest.raises(ValueError, match="different sizes"):
        build_index({"a": np.ones((1, 4), dtype=np.float32), "b": np.ones((1, 3), dtype=np.float32)})


def test_the_label_likelihood_router_weighs_its_best_label_against_none() -> None:
    sure = likelihood_scores({"billing": -1.0, "technical": -5.0}, none=-1.0 - math.log(4))
    assert sure.best == "billing"
    assert sure.confidence == pytest.approx(0.8)  # four times as likely as "none of these"
    unsure = likelihood_scores({"billing": -3.0, "technical": -2.0}, none=-2.0 - math.log(1.5))
    assert unsure.best == "technical"
    assert unsure.confidence == pytest.approx(0.6)  # only 1.5 times as likely: below the 2/3 floor
    floor = likelihood_calibration("d")
    assert (floor.threshold, floor.rule, floor.examples) == (pytest.approx(2 / 3, abs=1e-4), "likelihood", 0)
    assert sure.confidence >= floor.threshold > unsure.confidence
    assert likelihood_scores({}, none=0.0).best is None
    assert likelihood_scores({"a": -2000.0}, none=0.0).confidence == 0.0


def test_the_classification_prompt_lists_none_of_these() -> None:
    prompt = classification_prompt(["network", "access"], "vpn is down")
    assert "categories: network, access, none of these." in prompt
    assert "Request: vpn is down" in prompt
    answer_template = "You are the IT helpdesk.\nEmployee: {last_user}\nHelpdesk:"
    assert classification_prompt(["network"], "x", answer_template) == classification_prompt(["network"], "x")
    custom = "Options: {labels}\nText: {text}\nAnswer:"
    assert classification_prompt(["a"], "t", custom) == "Options: a, none of these\nText: t\nAnswer:"


MANIFEST = """
cluster: c
models:
  router:
    source: catalogue://minilm-l6
    intents:
      billing: ["my bill is wrong", "refund me"]
      technical: ["the app crashes"]
      legal: []
  specialists:
    - id: billing
      source: catalogue://tiny-llama
    - id: technical
      source: catalogue://tiny-llama
fallback:
  source: catalogue://tiny-llama
routing:
  entry: router
  dispatch_rule: router.output.intent -> specialists.{intent}
"""


def test_the_examples_and_their_digest_are_what_the_worker_is_asked_with() -> None:
    manifest = parse_manifest(MANIFEST)
    assert router_examples(manifest) == (
        ("billing", ("my bill is wrong", "refund me")),
        ("technical", ("the app crashes",)),
        ("legal", ("legal",)),  # no examples: the label stands for itself
    )
    ask = classify_request(manifest, "r", "hi")
    assert intent_examples(ask.labels, ask.examples) == router_examples(manifest)
    assert examples_digest(router_examples(manifest)) != examples_digest(
        router_examples(parse_manifest(MANIFEST.replace("refund me", "refund me now")))
    )


def test_a_manifest_threshold_wins_else_the_calibration_of_these_examples() -> None:
    manifest = parse_manifest(MANIFEST)
    assert manifest.router.confidence_threshold is None
    digest = examples_digest(router_examples(manifest))
    calibration = Calibration(threshold=0.31, rule="centroid", examples=4, digest=digest)
    calibrated = threshold_in_force(manifest, calibration)
    assert (calibrated.value, calibrated.source) == (0.31, "calibrated")
    assert calibrated.describe() == "0.31, calibrated from 4 examples"
    stale = msgspec.structs.replace(calibration, digest="other examples")
    assert threshold_in_force(manifest, stale).source == "none"
    assert threshold_in_force(manifest, None).value == 0.0
    set_by_hand = parse_manifest(MANIFEST.replace("    intents:", "    confidence_threshold: 0.5\n    intents:"))
    assert threshold_in_force(set_by_hand, calibration).describe() == "0.50, set in the manifest"
    zero = parse_manifest(MANIFEST.replace("    intents:", "    confidence_threshold: 0\n    intents:"))
    assert threshold_in_force(zero, calibration).source == "manifest"  # an explicit 0 is a choice too
    likelihood = threshold_in_force(manifest, likelihood_calibration(digest))
    assert likelihood.describe() == "0.67, the label-likelihood floor: the best label 2x as likely as 'none of these'"


def test_below_the_calibrated_floor_the_fallback_answers() -> None:
    manifest = parse_manifest(MANIFEST)
    calibration = Calibration(
        threshold=0.31, rule="centroid", examples=4, digest=examples_digest(router_examples(manifest))
    )
    low = choose_route(manifest, Scored(scores={"billing": 0.2}, best="billing", confidence=0.2), calibration)
    assert (low.intent, low.target, low.threshold, low.threshold_source) == (None, "fallback", 0.31, "calibrated")
    assert "'billing' confidence 0.20 is below the calibrated threshold 0.31" in low.rule
    high = choose_route(manifest, Scored(scores={"billing": 0.4}, best="billing", confidence=0.4), calibration)
    assert (high.intent, high.target) == ("billing", "billing")
    uncalibrated = choose_route(manifest, Scored(scores={"billing": 0.2}, best="billing", confidence=0.2))
    assert (uncalibrated.target, uncalibrated.threshold_source) == ("billing", "none")


def test_the_calibration_event_round_trips_and_is_folded_until_the_model_is_held_nowhere() -> None:
    event = RouterCalibrated(
        model_id="router", worker_id="w1", threshold=0.31, rule="centroid", examples=4, own=0.6, other=0.3, digest="d"
    )
    assert decode(encode(event)) == event
    state = fold([event])
    assert state.models["router"].calibrated == event
    loaded = TierChanged(
        model_id="router",
        worker_id="w1",
        from_tier="unloaded",
        to_tier="resident",
        reason="placement",
        elapsed_ms=1,
        bytes_held=1,
    )
    state = fold([loaded, event])
    assert state.models["router"].calibrated == event
    unloaded = msgspec.structs.replace(loaded, from_tier="resident", to_tier="unloaded", reason="command")
    assert fold([unloaded], state).models["router"].calibrated is None
