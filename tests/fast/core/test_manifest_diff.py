"""What one manifest changes against another (the swap's plan and `nrt up`'s summary read it)."""

from __future__ import annotations

from nrt.core.manifest import diff_manifests, parse_manifest

BASE = """cluster: test
resources: {gpu_budget: 4GB, ram_budget: 8GB}
models:
  router: {source: /models/router, tier: resident, footprint: 1GB}
  specialists:
    - {id: billing, source: /models/billing, tier: resident, footprint: 1GB}
    - {id: legal, source: /models/legal, tier: standby, footprint: 1GB}
routing:
  entry: router
  dispatch_rule: router.output.intent -> specialists.{intent}
"""


def test_added_dropped_replaced_and_retiered_models_are_told_apart() -> None:
    old = parse_manifest(BASE, "old.yaml")
    new_text = (
        BASE.replace("/models/billing", "/models/billing-2")
        .replace("{id: legal, source: /models/legal, tier: standby", "{id: contracts, source: /models/c, tier: standby")
        .replace("router: {source: /models/router, tier: resident", "router: {source: /models/router, tier: standby")
    )
    changes = diff_manifests(old, parse_manifest(new_text, "new.yaml"))
    assert (changes.added, changes.removed, changes.replaced, changes.retiered) == (
        ("contracts",),
        ("legal",),
        ("billing",),
        ("router",),
    )
    assert changes.summary() == (
        "adds contracts; drops legal; replaces the source of billing; changes the tier of router"
    )


def test_a_first_manifest_adds_everything_and_an_equal_one_changes_no_model() -> None:
    m = parse_manifest(BASE, "m.yaml")
    assert diff_manifests(None, m).added == ("router", "billing", "legal")
    same = diff_manifests(m, parse_manifest(BASE.replace("cluster: test", "cluster: renamed"), "m.yaml"))
    assert same.summary() == "the same models (other settings changed)"
