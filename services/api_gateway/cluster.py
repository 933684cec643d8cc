"""The cluster as the event log says it is: models, folded state, the manifest (and swapping it)."""

from __future__ import annotations

import logging
from typing import Any

from litestar import Request, Response, get, put
from litestar.di import NamedDependency
from litestar.params import FromQuery, RawBody
from msgspec.structs import replace

from api_gateway.auth import admin_key, caller, infer_key
from api_gateway.cluster_link import ClusterLink
from api_gateway.errors import ApiError
from api_gateway.openai_types import ManifestInfo, ModelInfo, ModelList, PlacementInfo, ThresholdInfo
from api_gateway.openapi_docs import ADMIN_SCHEME, KEYED, ManifestUpload, errors, options_handler
from api_gateway.served_endpoints import served
from nrt.adapters.bus import subjects
from nrt.adapters.bus.broker import call
from nrt.adapters.bus.errors import RemoteError
from nrt.adapters.manifest_sources import footprint_of
from nrt.core.manifest import Manifest, ManifestError, parse_manifest
from nrt.core.protocol import ApplyManifest, ApplyResult, StateQuery, WhatIf
from nrt.core.routing import threshold_in_force
from nrt.core.state import ClusterState
from nrt.core.whatif import WhatIfReport

log = logging.getLogger("api_gateway")


@get(
    "/v1/models",
    guards=[infer_key],
    summary="Every model of the manifest in force, with its declared tier and where it is loaded",
    responses=errors(503, *KEYED),
)
async def list_models(cluster_link: NamedDependency[ClusterLink]) -> ModelList:
    bus = cluster_link.require()
    manifest = bus.gate.manifest()
    created = int(bus.gate.applied_at.timestamp()) if bus.gate.applied_at is not None else 0
    return ModelList(
        data=model_infos(manifest, bus.follower.state, created), manifest_version=bus.follower.state.manifest_version
    )


def model_infos(manifest: Manifest, state: ClusterState, created: int) -> list[ModelInfo]:
    out = []
    for spec in manifest.models:
        model = state.models.get(spec.id)
        placements = (
            [
                PlacementInfo(worker_id=p.worker_id, tier=p.tier, bytes_held=p.bytes_held)
                for p in model.placements.values()
            ]
            if model is not None
            else []
        )
        out.append(
            ModelInfo(
                id=spec.id,
                created=created,
                owned_by=manifest.cluster,
                role=spec.role.value,
                routed=spec.id == manifest.routing.entry,
                tier=spec.tier.value,
                priority=spec.priority.value,
                source=spec.source,
                description=spec.description,
                placements=placements,
                endpoints=list(served(manifest, spec.id)),
                threshold=threshold_info(manifest, state) if spec.id == manifest.routing.entry else None,
            )
        )
    return out


def threshold_info(manifest: Manifest, state: ClusterState) -> ThresholdInfo:
    """The entry model's floor: the manifest's, else the one its router model recorded calibrating."""
    entry = state.models.get(manifest.routing.entry)
    threshold = threshold_in_force(manifest, entry.calibrated if entry is not None else None)
    return ThresholdInfo(
        value=threshold.value,
        source=threshold.source,
        rule=threshold.rule,
        examples=threshold.examples,
        summary=f"threshold {threshold.describe()}",
    )


STATE_SOURCE_HEADER = "X-NRT-State-Source"
STATE_TIMEOUT = 2.0


@get(
    "/v1/cluster",
    guards=[infer_key],
    summary="The folded cluster state, as cluster_state recorded it",
    description=(
        "cluster_state's fold of the PostgreSQL event log (`nrt.state.get`): what `nrt replay` computes. "
        "When cluster_state does not answer, the gateway's own fold of the control-plane events "
        "(manifest, drains, workers, placements and tiers; no request or session counts), marked "
        f"`{STATE_SOURCE_HEADER}: gateway` (else `cluster_state`). `api_keys` (hashes and usage) is "
        "empty unless the caller's key is an admin key."
    ),
    responses=errors(503, *KEYED),
)
async def cluster_state(
    cluster_link: NamedDependency[ClusterLink], request: Request[Any, Any, Any]
) -> Response[ClusterState]:
    bus = cluster_link.require()
    try:
        state = await call(bus.broker, subjects.STATE, StateQuery(), ClusterState, timeout=STATE_TIMEOUT)
        source = "cluster_state"
    except RemoteError as exc:
        log.warning("cluster_state did not answer %s (%s); serving the gateway's own fold", subjects.STATE, exc)
        state, source = bus.follower.state, "gateway"
    if not caller(request).admin:  # the keys' hashes and usage are for admins
        state = replace(state, api_keys={})
    return Response(state, headers={STATE_SOURCE_HEADER: source})


@get(
    "/v1/manifest", guards=[infer_key], summary="The manifest in force: version and text", responses=errors(503, *KEYED)
)
async def get_manifest(cluster_link: NamedDependency[ClusterLink]) -> ManifestInfo:
    state = cluster_link.require().follower.state
    if state.manifest_text is None:
        raise ApiError(503, "no manifest has been applied to the cluster yet", code="no_manifest")
    return ManifestInfo(
        version=state.manifest_version, cluster=state.cluster, digest=state.manifest_digest, text=state.manifest_text
    )


@put(
    "/v1/manifest",
    guards=[admin_key],
    summary="Replace the manifest (admin): validated here, then a drained swap by cluster_state",
    description=(
        "The body is the manifest text (YAML). Needs an admin key (`Authorization: Bearer $NRT_ADMIN_KEY`). "
        "With `dry_run=true` nothing is applied: the answer is the candidate's what-if report (what "
        "`nrt replay --what-if` prints) over the requests recorded with `audit: {record_prompts: true}`: "
        "routing changes, requests to the fallback, budgets, tier transitions and cold starts; `ok` is false "
        "when a constraint would break."
    ),
    responses=errors(400, 401, 403, 409, 413, 422, 429, 500, 502, 503, 504),
    security=[{ADMIN_SCHEME: []}],
    operation_class=ManifestUpload,
)
async def put_manifest(
    cluster_link: NamedDependency[ClusterLink], body: RawBody, dry_run: FromQuery[bool] = False
) -> ApplyResult | WhatIfReport:
    try:
        data = body.decode("utf-8")
    except UnicodeDecodeError:
        raise ApiError(400, "the manifest must be UTF-8 text", code="invalid_encoding") from None
    bus = cluster_link.require()
    try:  # a dry run reports a candidate's budgets instead of refusing it
        manifest = parse_manifest(data, "PUT /v1/manifest", footprint_of, budgets=not dry_run)
    except ManifestError as exc:
        raise ApiError(
            422,
            exc.summary(),
            code="invalid_manifest",
            param=exc.problems[0].path or None if exc.problems else None,
            problems=[p.render(exc.file) for p in exc.problems],
        ) from None
    if dry_run:
        try:
            return await call(
                bus.broker,
                subjects.MANIFEST_WHATIF,
                WhatIf(text=data),
                WhatIfReport,
                cluster_link.settings.apply_timeout,
            )
        except RemoteError as exc:
            raise ApiError.from_remote(exc) from None
    timeout = manifest.drain.timeout + cluster_link.settings.apply_timeout
    try:
        return await call(
            bus.broker, subjects.MANIFEST_APPLY, ApplyManifest(text=data, requested_by="api"), ApplyResult, timeout
        )
    except RemoteError as exc:
        raise ApiError.from_remote(exc) from None


manifest_options = options_handler("/v1/manifest", get_manifest, put_manifest)
