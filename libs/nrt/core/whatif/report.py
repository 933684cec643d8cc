"""The what-if report: the recorded requests run through a candidate manifest, and what would change.

Pure: the recorded requests, the manifest in force, the candidate (footprints filled in) and a
way to classify a text with the candidate's router in, the report out. A request whose router
is the candidate's (the same ``router_identity``) keeps the intent it was given, since the
classification is deterministic; the others are classified again, so the router model runs only
when the candidate changes it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import msgspec

from nrt.core.manifest import Manifest
from nrt.core.routing import Decision
from nrt.core.whatif.recorded import RecordedRequest, router_identity
from nrt.core.whatif.simulate import BudgetUse, Refusal, Step, TierTransition, simulate

Classify = Callable[[str], Decision]
"""The candidate's routing decision for a text (its router model, threshold and dispatch rule)."""

EXAMPLES = 3  # distinct example texts kept per routing change


def _examples(texts: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(texts))[:EXAMPLES]


class Route(msgspec.Struct, frozen=True, kw_only=True):
    intent: str | None
    target: str

    def describe(self) -> str:
        return f"{self.intent or '<none>'} ({self.target})"


class RoutingChange(msgspec.Struct, frozen=True, kw_only=True):
    """Requests that went one way and would go another: how many, and a few of their texts."""

    before: Route
    after: Route
    count: int
    examples: list[str]  # up to EXAMPLES distinct texts


class Violation(msgspec.Struct, frozen=True, kw_only=True):
    code: str  # over_budget | promotion_refused
    message: str


class WhatIfReport(msgspec.Struct, frozen=True, kw_only=True):
    cluster: str  # the candidate's
    current_version: int  # the manifest in force when the report was made
    candidate_digest: str
    requests: int  # recorded requests replayed
    reclassified: int  # of them, run through the candidate's router model (its router differs)
    unchanged: int  # routed as before
    changes: list[RoutingChange]
    to_fallback: int  # requests the candidate sends to its fallback
    fallback_examples: list[str]
    budgets: list[BudgetUse]
    transitions: list[TierTransition]  # at apply (at: None), then over the recorded traffic
    cold_starts: int
    refusals: list[Refusal]
    violations: list[Violation]
    ok: bool  # no violation: the candidate keeps every constraint over the recorded traffic
    # of the requests replayed, how many had a constrained answer, by kind (json_schema, json_object, tools)
    constrained: dict[str, int] = {}


def _refused(refusals: Sequence[Refusal]) -> list[Violation]:
    """One violation per model whose promotions would be refused: how often, and the first one's reason."""
    by_model: dict[str, list[Refusal]] = {}
    for refusal in refusals:
        by_model.setdefault(refusal.model_id, []).append(refusal)
    return [
        Violation(
            code="promotion_refused",
            message=f"{model_id}: {len(found)} promotion(s) refused over the traffic, the first for request "
            f"{found[0].request_id} ({found[0].code}): {found[0].reason}",
        )
        for model_id, found in by_model.items()
    ]


def build_report(
    requests: Sequence[RecordedRequest],
    current: Manifest | None,
    current_version: int,
    candidate: Manifest,
    classifier: Callable[[], Classify],
) -> WhatIfReport:
    """Run ``requests`` through ``candidate``; ``classifier`` is asked for (once) only if a request needs it."""
    identity = router_identity(candidate)
    classify: Classify | None = None
    steps: list[Step] = []
    groups: dict[tuple[Route, Route], list[str]] = {}
    reclassified = 0
    for request in requests:
        if request.router == identity:
            intent = request.intent
            after = Route(intent=intent, target=candidate.dispatch_target(intent))
        else:
            classify = classify or classifier()
            decision = classify(request.prompt)
            after = Route(intent=decision.intent, target=decision.target)
            reclassified += 1
        before = Route(intent=request.intent, target=request.target)
        groups.setdefault((before, after), []).append(request.prompt)
        steps.append(Step(request_id=request.request_id, at=request.at, intent=after.intent, target=after.target))
    changes = [
        RoutingChange(before=before, after=after, count=len(texts), examples=_examples(texts))
        for (before, after), texts in groups.items()
        if before != after
    ]
    changes.sort(key=lambda c: (-c.count, c.before.describe(), c.after.describe()))
    fallback = candidate.fallback.id if candidate.fallback is not None else None
    to_fallback = [r.prompt for r, s in zip(requests, steps, strict=True) if s.target == fallback]
    simulation = simulate(current, candidate, steps)
    violations = [Violation(code="over_budget", message=use.describe()) for use in simulation.budgets if not use.fits]
    violations += _refused(simulation.refusals)
    return WhatIfReport(
        cluster=candidate.cluster,
        current_version=current_version,
        candidate_digest=candidate.digest,
        requests=len(requests),
        reclassified=reclassified,
        unchanged=sum(len(texts) for (before, after), texts in groups.items() if before == after),
        changes=changes,
        to_fallback=len(to_fallback),
        fallback_examples=_examples(to_fallback),
        budgets=simulation.budgets,
        transitions=simulation.transitions,
        cold_starts=simulation.cold_starts,
        refusals=simulation.refusals,
        violations=violations,
        ok=not violations,
        constrained=_constrained(requests),
    )


def _constrained(requests: Sequence[RecordedRequest]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for request in requests:
        if request.constrained is not None:
            counts[request.constrained] = counts.get(request.constrained, 0) + 1
    return dict(sorted(counts.items()))
