"""Reading events written at an older schema version: upcasters, one per (type, from-version).

Each event class has a ``VERSION``. A row of the log (its ``schema_version`` column) and a
message of the stream (its ``Nrt-Event-Version`` header) say which version wrote the body;
a body older than its class's ``VERSION`` goes through the upcasters from its version up to
the current one before it is decoded. The stored bytes never change (the hash chain covers
them): upcasting happens on every read.

An upcaster takes the JSON object of version ``n`` and returns that of version ``n + 1``. It must
also accept a body already at a later version (a message published without a version header
is read as version 1), so it only adds what is missing or renames what is still there.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

Body = dict[str, Any]
Upcaster = Callable[[Body], Body]

VERSION_HEADER = "Nrt-Event-Version"  # the schema version of a message's body on the stream


class UpcastError(ValueError):
    """A body at a version this code cannot read (newer than its class, or with no upcaster on the way)."""


def _worker_joined_v1(body: Body) -> Body:
    """Version 2 added ``role``: every worker of version 1 was a specialist (router hosts came with v2)."""
    return {"role": "specialist", **body}


def _worker_joined_v2(body: Body) -> Body:
    """Version 3 added ``device``: before it, a worker that reported accelerator memory had a CUDA GPU
    (the only accelerator it detected), any other ran its models on its CPU, in the RAM it offered."""
    if "device" in body:
        return body
    accelerator = int(body.get("accelerator_bytes") or 0)
    if accelerator > 0:
        device = {"kind": "cuda", "id": "", "name": "", "total_bytes": accelerator}
    else:
        device = {"kind": "cpu", "id": "", "name": "", "total_bytes": int(body.get("ram_bytes") or 0)}
    return {**body, "device": device}


def _key_id_v1(body: Body) -> Body:
    """Version 2 added ``key_id``: version 1 requests were not charged to a key (authentication came later)."""
    return {"key_id": None, **body}


def _prompt_v2(body: Body) -> Body:
    """Version 3 added ``prompt``: texts were not recorded before ``audit.record_prompts`` existed."""
    return {"prompt": None, **body}


def _tier_changed_v1(body: Body) -> Body:
    """Version 2 added ``error``: a failed load of version 1 recorded no reason."""
    return {"error": None, **body}


def _tier_changed_v2(body: Body) -> Body:
    """Version 3 added ``weights``: loads before it did not record which weights they loaded."""
    return {"weights": None, **body}


def _gateway_v3(body: Body) -> Body:
    """Version 4 added ``gateway_id``: the admitting gateway was not recorded before (its requests have no known owner)."""
    return {"gateway_id": None, **body}


def _constrained_v4(body: Body) -> Body:
    """Version 5 added ``constrained`` and ``constraint``: whether an answer was constrained was not recorded."""
    return {"constrained": None, "constraint": None, **body}


UPCASTERS: Mapping[tuple[str, int], Upcaster] = {
    ("WorkerJoined", 1): _worker_joined_v1,
    ("WorkerJoined", 2): _worker_joined_v2,
    ("RequestAdmitted", 1): _key_id_v1,
    ("RequestAdmitted", 2): _prompt_v2,
    ("RequestAdmitted", 3): _gateway_v3,
    ("RequestAdmitted", 4): _constrained_v4,
    ("RequestCompleted", 1): _key_id_v1,
    ("RequestFailed", 1): _key_id_v1,
    ("TierChanged", 1): _tier_changed_v1,
    ("TierChanged", 2): _tier_changed_v2,
}


def upcast(
    type_name: str, version: int, current: int, body: Body, upcasters: Mapping[tuple[str, int], Upcaster] = UPCASTERS
) -> Body:
    """``body`` of ``type_name`` written at ``version``, brought to ``current`` one version at a time."""
    if version > current:
        raise UpcastError(
            f"{type_name} version {version} is newer than this code reads (version {current}); upgrade NRT"
        )
    for step in range(version, current):
        upcaster = upcasters.get((type_name, step))
        if upcaster is None:
            raise UpcastError(f"no upcaster reads {type_name} version {step} (current version {current})")
        body = upcaster(body)
    return body


def missing_upcasters(
    versions: Mapping[str, int], upcasters: Mapping[tuple[str, int], Upcaster] = UPCASTERS
) -> list[str]:
    """``type vN`` for every older version of a type in ``versions`` that no upcaster reads (the schema's check)."""
    return [
        f"{name} v{step}"
        for name, current in versions.items()
        for step in range(1, current)
        if (name, step) not in upcasters
    ]
