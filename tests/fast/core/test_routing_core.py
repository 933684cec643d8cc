"""The pure routing core: labels from the manifest only, thresholds, dispatch resolution."""

from __future__ import annotations

import numpy as np
import pytest

from harness import FIXTURES
from nrt.core.events import TierChanged, WorkerJoined, WorkerLost
from nrt.core.manifest import parse_manifest
from nrt.core.protocol import ChatMessage, ClassifyReply
from nrt.core.routing import (
    Scored,
    choose_route,
    classify_request,
    resolve_model,
    restrict,
    routing_text,
    serving_workers,
)
from nrt.core.state import fold
from nrt.hosting.embeddings.index import build_index
from nrt.hosting.embeddings.rules import score

SUPPORT = parse_manifest((FIXTURES / "tiny-support.yaml").read_text())
LABELS = SUPPORT.intent_labels  # billing, technical, legal


def reply(scores: dict[str, float], best: str, confidence: float) -> ClassifyReply:
    return ClassifyReply(
        model_id="router", worker_id="w", scores=scores, best=best, confidence=confidence, latency_ms=1
    )


def with_changes(old: str, new: str) -> str:
    text = (FIXTURES / "tiny-support.yaml").read_text()
    assert old in text
    return text.replace(old, new)


def test_the_labels_and_examples_come_from_the_manifest() -> None:
    ask = classify_request(SUPPORT, "r1", "hello")
    assert ask.labels == ("billing", "technical", "legal")
    assert ask.examples["billing"] == ("I was charged twice for my order",)
    assert ask.model_id == "router"


def test_a_label_outside_the_manifest_can_never_be_returned() -> None:
    scored = restrict(reply({"billing": 0.2, "refunds": 0.99, "technical": 0.5}, "refunds", 0.99), LABELS)
    assert scored.best == "technical"
    assert "refunds" not in scored.scores
    assert scored.confidence == 0.0  # the model preferred an unknown label: untrusted
    decision = choose_route(SUPPORT, scored)
    assert decision.intent is None
    assert decision.target == "fallback"


def test_the_models_confidence_is_kept_when_its_best_label_is_allowed() -> None:
    scored = restrict(reply({"billing": 0.9, "technical": 0.5, "legal": 0.1}, "billing", 0.9995), LABELS)
    assert scored == Scored(scores={"billing": 0.9, "technical": 0.5, "legal": 0.1}, best="billing", confidence=0.9995)
    decision = choose_route(SUPPORT, scored)
    assert (decision.intent, decision.target) == ("billing", "billing")
    assert decision.rule == "router.output.intent -> specialists.{intent} => billing"


def test_no_allowed_scores_and_non_finite_scores() -> None:
    scored = restrict(reply({"x": 1.0, "billing": float("nan")}, "x", 1.0), LABELS)
    assert scored.best is None
    decision = choose_route(SUPPORT, scored)
    assert decision.target == "fallback"
    assert "no allowed label was scored" in decision.rule


def test_below_the_threshold_goes_to_the_fallback() -> None:
    decision = choose_route(SUPPORT, Scored(scores={"billing": 0.98}, best="billing", confidence=0.98))
    assert decision.intent is None
    assert decision.target == "fallback"
    assert "'billing' confidence 0.98 is below the threshold 1.00" in decision.rule


def test_an_intent_without_a_specialist_goes_to_the_fallback() -> None:
    decision = choose_route(SUPPORT, Scored(scores={"legal": 1.0}, best="legal", confidence=1.0))
    assert (decision.intent, decision.target) == ("legal", "fallback")
    assert "no specialist serves intent 'legal'" in decision.rule


def test_without_a_fallback_the_router_answers() -> None:
    manifest = parse_manifest((FIXTURES / "tiny-generative.yaml").read_text())
    low = choose_route(manifest, Scored(scores={"billing": 0.4}, best="billing", confidence=0.4))
    assert low.target == "billing"  # threshold 0.0: any allowed label is confident
    strict = parse_manifest(
        (FIXTURES / "tiny-generative.yaml")
        .read_text()
        .replace("confidence_threshold: 0.0", "confidence_threshold: 0.9")
    )
    unsure = choose_route(strict, Scored(scores={"billing": 0.4}, best="billing", confidence=0.4))
    assert (unsure.intent, unsure.target) == (None, "router")
    assert "(entry model:" in unsure.rule


def test_a_fixed_route_ignores_the_intent_but_records_it() -> None:
    manifest = parse_manifest(with_changes("specialists.{intent}", "specialists.technical"))
    decision = choose_route(manifest, Scored(scores={"billing": 1.0}, best="billing", confidence=1.0))
    assert (decision.intent, decision.target) == ("billing", "technical")
    assert decision.rule.endswith("(fixed route)")


def test_routed_direct_and_unknown_models() -> None:
    assert resolve_model(SUPPORT, "router") == "routed"
    assert resolve_model(SUPPORT, "billing") == "direct"
    assert resolve_model(SUPPORT, "fallback") == "direct"
    assert resolve_model(SUPPORT, "gpt-4o") is None


def test_each_turn_is_routed_on_its_last_user_message() -> None:
    messages = (
        ChatMessage("system", "be brief"),
        ChatMessage("user", "my invoice is wrong"),
        ChatMessage("assistant", "sorry"),
        ChatMessage("user", "and the app crashes"),
    )
    assert routing_text(messages) == "and the app crashes"
    with pytest.raises(ValueError, match="at least one user message"):
        routing_text((ChatMessage("system", "x"),))


def test_nearest_centroid_with_confidence() -> None:
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=16).astype(np.float32), rng.normal(size=16).astype(np.float32)
    index = build_index({"a": np.stack([a, a + 0.01]), "b": b[None, :]})
    scored = score(index, a * 3, "centroid")
    assert scored.best == "a"
    assert scored.confidence == pytest.approx(1.0, abs=1e-3)
    assert scored.scores["b"] < scored.scores["a"]
    assert score(index, -a, "centroid").confidence == 0.0  # opposite direction: clipped to 0
    with pytest.raises(ValueError, match="at least one example"):
        build_index({"a": np.zeros((0, 16), dtype=np.float32)})


def test_serving_workers_come_from_live_placements() -> None:
    joined = [WorkerJoined(worker_id=w, host="h", cpu_count=1, ram_bytes=1) for w in ("w1", "w2")]
    tiers = [
        TierChanged(
            model_id="billing",
            worker_id=w,
            from_tier="unloaded",
            to_tier=t,
            reason="placement",
            elapsed_ms=1,
            bytes_held=1,
        )
        for w, t in (("w1", "standby"), ("w2", "resident"))
    ]
    state = fold([*joined, *tiers])
    assert serving_workers(state, "billing") == ("w1", "w2")
    assert serving_workers(state, "technical") == ()
    assert serving_workers(fold([WorkerLost(worker_id="w2", reason="heartbeat_timeout")], state), "billing") == ("w1",)
