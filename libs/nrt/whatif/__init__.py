"""What-if replays: recorded requests run through a candidate manifest, offline (``nrt replay --what-if``)."""

from nrt.whatif.recorded import RecordedRequest, recorded_requests, router_identity
from nrt.whatif.report import Classify, RoutingChange, Violation, WhatIfReport, build_report
from nrt.whatif.simulate import BudgetUse, Refusal, TierTransition

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
