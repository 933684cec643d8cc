"""The what-if report's pure core: recorded requests through a candidate manifest.

The tiny support manifest's router is the real tiny encoder (``@TINY_BERT@``): a request that
repeats an intent's example routes there with confidence 1.0, anything else falls below its
0.999 floor (to the fallback). The tier simulation runs the controller's own policies.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from harness import fixture_manifest
from nrt.core.manifest import Manifest, Tier, parse_manifest
from nrt.core.whatif import RecordedRequest, build_report, router_identity
from nrt.core.whatif.report import Classify
from nrt.hosting.offline_router import offline_router

BILLING = "I was charged twice for my order"
TECHNICAL = "the app crashes when I open it"
OTHER = "what is the weather like on the moon"
T0 = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
FIXED_TECHNICAL = "router.output.intent -> specialists.technical"


def recorded(manifest: Manifest, *decisions: tuple[str, str | None]) -> list[RecordedRequest]:
    """Requests as router_svc recorded them under ``manifest``: (text, intent), a second apart."""
    return [
        RecordedRequest(
            request_id=f"r{i}",
            at=T0 + timedelta(seconds=i),
            manifest_version=1,
            prompt=text,
            intent=intent,
            target=manifest.dispatch_target(intent),
            router=router_identity(manifest),
        )
        for i, (text, intent) in enumerate(decisions)
    ]


def no_classifier() -> Classify:
    raise AssertionError("the candidate's router is the recorded one: nothing needs classifying again")


def support(nrt_home: Path, edit: tuple[str, str] | None = None) -> Manifest:
    text = fixture_manifest("tiny-support.yaml")
    if edit is not None:
        assert edit[0] in text
        text = text.replace(*edit)
    return parse_manifest(text, budgets=False)


TRAFFIC = ((BILLING, "billing"), (BILLING, "billing"), (TECHNICAL, "technical"), (OTHER, None))


def test_moving_an_intent_to_another_specialist_reports_its_requests_with_counts_and_examples(nrt_home: Path) -> None:
    current = support(nrt_home)
    candidate = support(nrt_home, ("specialists.{intent}", "specialists.technical"))
    report = build_report(recorded(current, *TRAFFIC), current, 1, candidate, no_classifier)
    moved = {(c.before.describe(), c.after.describe()): (c.count, c.examples) for c in report.changes}
    assert moved == {
        ("billing (billing)", "billing (technical)"): (2, [BILLING]),
        ("<none> (fallback)", "<none> (technical)"): (1, [OTHER]),
    }
    assert (report.requests, report.unchanged, report.reclassified, report.to_fallback) == (4, 1, 0, 0)
    assert report.ok
    assert report.violations == []


def test_a_changed_router_runs_the_real_router_model_offline_and_decides_as_it_did_live(nrt_home: Path) -> None:
    current = support(nrt_home)
    candidate = support(
        nrt_home, ('      legal: ["send', '      shipping: ["where is my parcel"]\n      legal: ["send')
    )
    assert router_identity(candidate) != router_identity(current)
    live = offline_router(current)  # the decisions router_svc records for the manifest in force
    traffic = [(text, live(text).intent) for text in (BILLING, TECHNICAL, OTHER)]
    assert [intent for _, intent in traffic] == ["billing", "technical", None]
    report = build_report(recorded(current, *traffic), current, 1, candidate, lambda: offline_router(candidate))
    assert (report.reclassified, report.unchanged, report.changes) == (3, 3, [])
    assert (report.to_fallback, report.fallback_examples) == (1, [OTHER])


def test_a_candidate_whose_residents_exceed_its_budget_breaks_a_constraint(nrt_home: Path) -> None:
    current = support(nrt_home)
    candidate = support(nrt_home, ("cluster: tiny-support", "cluster: tiny-support\nresources: {gpu_budget: 1KB}"))
    candidate = parse_manifest(
        candidate.text.replace(
            "      tier: resident\n      co_activation",
            "      tier: resident\n      footprint: 10KB\n      co_activation",
        ),
        budgets=False,
    )
    report = build_report(recorded(current, *TRAFFIC), current, 1, candidate, no_classifier)
    assert not report.ok
    assert next(v.code for v in report.violations) == "over_budget"
    resident = next(use for use in report.budgets if use.tier is Tier.RESIDENT)
    assert not resident.fits
    assert resident.used >= 10_000
    assert "billing" in resident.models


BUDGETED = """
cluster: budgeted
resources: {gpu_budget: 300MB}
models:
  router:
    source: /models/router
    footprint: 100MB
    priority: critical
    confidence_threshold: 0.5
    intents: {billing: ["my bill"], technical: ["it crashes"]}
  specialists:
    - {id: billing, source: /models/billing, footprint: 100MB}
    - {id: technical, source: /models/technical, footprint: 100MB, tier: standby}
fallback: {source: /models/fallback, footprint: 100MB, tier: standby}
routing:
  entry: router
  dispatch_rule: router.output.intent -> specialists.{intent}
"""


def test_the_traffic_causes_cold_starts_and_lru_demotions_under_the_candidates_budget() -> None:
    manifest = parse_manifest(BUDGETED)
    traffic = recorded(manifest, ("my bill", "billing"), ("it crashes", "technical"), ("hello", None))
    report = build_report(traffic, manifest, 1, manifest, no_classifier)
    moves = [(t.request_id, t.model_id, t.from_tier, t.to_tier, t.reason, t.cold_start) for t in report.transitions]
    assert moves == [
        ("r1", "technical", Tier.STANDBY, Tier.RESIDENT, "on_demand", True),
        ("r2", "billing", Tier.RESIDENT, Tier.STANDBY, "budget_pressure", False),  # least recently used
        ("r2", "fallback", Tier.STANDBY, Tier.RESIDENT, "on_demand", True),
    ]
    assert report.cold_starts == 2
    assert report.ok


def test_a_promotion_the_budget_cannot_make_room_for_is_a_broken_constraint() -> None:
    critical = BUDGETED.replace("footprint: 100MB}", "footprint: 100MB, priority: critical}", 1)
    manifest = parse_manifest(critical.replace("tier: standby}", "tier: standby, priority: critical}", 1))
    traffic = recorded(manifest, ("my bill", "billing"), ("it crashes", "technical"), ("hello", None))
    report = build_report(traffic, manifest, 1, manifest, no_classifier)
    assert [v.code for v in report.violations] == ["promotion_refused"]
    assert report.refusals[0].model_id == "fallback"
    assert report.refusals[0].code == "budget_exhausted"
    assert "gpu_budget" in report.violations[0].message


@pytest.mark.parametrize("value", ["yes please", 1])
def test_audit_record_prompts_must_be_a_boolean(value: object) -> None:
    from nrt.core.manifest import ManifestError

    with pytest.raises(ManifestError, match=r"audit\.record_prompts"):
        parse_manifest(BUDGETED + f"audit: {{record_prompts: {value}}}\n")
    assert parse_manifest(BUDGETED + "audit: {record_prompts: true}\n").audit.record_prompts
    assert not parse_manifest(BUDGETED).audit.record_prompts


def test_a_router_on_standby_is_promoted_by_the_first_request_it_classifies() -> None:
    manifest = parse_manifest(BUDGETED.replace("    priority: critical\n", "    tier: standby\n", 1))
    traffic = recorded(manifest, ("my bill", "billing"), ("my bill", "billing"))
    report = build_report(traffic, manifest, 1, manifest, no_classifier)
    moves = [(t.request_id, t.model_id, t.from_tier, t.to_tier, t.cold_start) for t in report.transitions]
    assert moves == [("r0", "router", Tier.STANDBY, Tier.RESIDENT, True)]
