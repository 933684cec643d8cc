"""A candidate manifest's what-if over an event log: what ``nrt replay --what-if`` and
``PUT /v1/manifest?dry_run=true`` (through cluster_state) both run.

The report is the core's (``nrt.core.whatif``); this module gives it the candidate's footprints
from the catalogue and, when the candidate's router must run, the router model itself.
"""

from __future__ import annotations

from nrt.core.manifest import Manifest, parse_manifest
from nrt.core.policies.budget import with_footprints
from nrt.core.whatif.candidate import Recorded
from nrt.core.whatif.report import Classify, WhatIfReport, build_report


def _offline_router(candidate: Manifest) -> Classify:
    from nrt.hosting.offline_router import offline_router  # ONNX Runtime, only when a router must run

    return offline_router(candidate)


def parse_candidate(text: str, file: str) -> Manifest:
    """The candidate, its footprints filled in from the catalogue; its budgets are the report's to check."""
    from nrt.adapters.manifest_sources import footprint_of

    return with_footprints(parse_manifest(text, file, footprint_of, budgets=False), footprint_of)


def what_if(recorded: Recorded, candidate: Manifest) -> WhatIfReport:
    return build_report(
        recorded.requests, recorded.manifest(), recorded.manifest_version, candidate, lambda: _offline_router(candidate)
    )
