"""A candidate manifest's what-if over an event log: what ``nrt replay --what-if`` and
``PUT /v1/manifest?dry_run=true`` (through cluster_state) both run."""

from __future__ import annotations

from datetime import datetime

import msgspec

from nrt.events import Event, ManifestApplied, RequestAdmitted, RequestRouted
from nrt.manifest import Manifest, ManifestError, parse_manifest
from nrt.policies.budget import with_footprints
from nrt.store import EventLog
from nrt.whatif.recorded import RecordedRequest, recorded_requests
from nrt.whatif.report import Classify, WhatIfReport, build_report


class Recorded(msgspec.Struct, frozen=True, kw_only=True):
    """The log's replayable requests and the manifest in force at its head."""

    requests: list[RecordedRequest]
    manifest_text: str | None
    manifest_version: int

    def manifest(self) -> Manifest | None:
        if self.manifest_text is None:
            return None
        try:
            return parse_manifest(self.manifest_text, "the manifest in force", budgets=False)
        except ManifestError:
            return None  # written by an older version: its tiers are not compared


async def read_recorded(log: EventLog, since: datetime | None = None) -> Recorded:
    """One pass over the log: the manifests, the recorded prompts and the routing decisions."""
    kept: list[Event] = []
    last: ManifestApplied | None = None
    async for _, event in log.replay(1):
        if isinstance(event, ManifestApplied):
            last = event
            kept.append(event)
        elif (isinstance(event, RequestAdmitted) and event.prompt is not None) or isinstance(event, RequestRouted):
            kept.append(event)
    return Recorded(
        requests=recorded_requests(kept, since),
        manifest_text=last.text if last is not None else None,
        manifest_version=last.version if last is not None else 0,
    )


def _offline_router(candidate: Manifest) -> Classify:
    from nrt.hosting.offline_router import offline_router  # ONNX Runtime, only when a router must run

    return offline_router(candidate)


def parse_candidate(text: str, file: str) -> Manifest:
    """The candidate, its footprints filled in from the catalogue; its budgets are the report's to check."""
    from nrt.manifest_sources import footprint_of

    return with_footprints(parse_manifest(text, file, footprint_of, budgets=False), footprint_of)


def what_if(recorded: Recorded, candidate: Manifest) -> WhatIfReport:
    return build_report(
        recorded.requests, recorded.manifest(), recorded.manifest_version, candidate, lambda: _offline_router(candidate)
    )
