"""What a candidate manifest's what-if reads from the event log: the replayable requests and the
manifest in force. ``nrt.hosting.whatif_run`` runs the candidate's router over them."""

from __future__ import annotations

from datetime import datetime

import msgspec

from nrt.core.eventlog import EventLog
from nrt.core.events import Event, ManifestApplied, RequestAdmitted, RequestRouted
from nrt.core.manifest import Manifest, ManifestError, parse_manifest
from nrt.core.whatif.recorded import RecordedRequest, recorded_requests


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
