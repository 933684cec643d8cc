"""What-if replays: recorded requests run through a candidate manifest, offline (``nrt replay --what-if``)."""

from nrt.core.whatif.recorded import RecordedRequest, recorded_requests, router_identity
from nrt.core.whatif.report import Classify, RoutingChange, Violation, WhatIfReport, build_report
from nrt.core.whatif.simulate import BudgetUse, Refusal, TierTransition

__all__ = [
    "BudgetUse",
    "Classify",
    "RecordedRequest",
    "Refusal",
    "RoutingChange",
    "TierTransition",
    "Violation",
    "WhatIfReport",
    "build_report",
    "recorded_requests",
    "router_identity",
]
