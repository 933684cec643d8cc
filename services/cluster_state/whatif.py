"""``nrt.manifest.whatif``: a candidate manifest's what-if over the recorded requests, applying nothing.

The report ``nrt replay --what-if`` prints (``nrt.core.whatif``), from cluster_state's own log; the
candidate's router model runs here, off the event loop, only when it differs from the recorded one.
"""

from __future__ import annotations

import asyncio

from nrt.adapters.bus.errors import BadRequest, RemoteError
from nrt.core.eventlog import EventLog
from nrt.core.manifest import ManifestError
from nrt.core.protocol import WhatIf
from nrt.core.whatif import WhatIfReport
from nrt.core.whatif.candidate import read_recorded
from nrt.hosting.whatif_run import parse_candidate, what_if

INVALID = 422


async def dry_run(log: EventLog, request: WhatIf) -> WhatIfReport:
    try:
        candidate = parse_candidate(request.text, "the candidate manifest")
    except ManifestError as exc:
        raise RemoteError("invalid_manifest", exc.summary(), INVALID) from None
    recorded = await read_recorded(log, request.since)
    try:
        return await asyncio.to_thread(what_if, recorded, candidate)
    except ValueError as exc:  # a remote entry model: it cannot run here
        raise BadRequest(f"cannot run the candidate's router offline: {exc}", code="router_not_local") from None
