"""The message contract: every subject is in it, the AsyncAPI document shows it, the handlers match it."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, get_type_hints

import pytest

from cluster_state.controller import Controller
from cluster_state.service import ClusterStateService
from nrt.adapters.bus import contract, subjects
from nrt.core.events import EVENT_TYPES
from nrt.entrypoints.service import health_subject


def _every_subject() -> list[str]:
    """Each constant subject of ``nrt.adapters.bus.subjects``, and each subject function with a sample token."""
    not_subjects = {"PREFIX", "EVENTS_STREAM", "EVENTS_PREFIX", "EVENTS_ALL", "INFER_QUEUE", "RATE_LIMITS_BUCKET"}
    found = [
        value
        for name, value in vars(subjects).items()
        if name.isupper() and name not in not_subjects and isinstance(value, str)
    ]
    functions = [f for f in vars(subjects).values() if inspect.isfunction(f) and f.__module__ == subjects.__name__]
    assert {f.__name__ for f in functions} == {"infer", "infer_at", "control", "event", "events_of", "event_origin"}, (
        "a new subject function: cover it here"
    )
    found += [subjects.infer("billing"), subjects.infer_at("billing", "w1"), subjects.control("w1")]
    found += [subject for t in EVENT_TYPES for subject in contract.event_subjects(t.__name__)]
    found += [health_subject(service) for service in contract.SERVICES if service != "nrt"]
    return found


@pytest.mark.parametrize("subject", _every_subject())
def test_every_subject_is_a_channel_of_the_contract(subject: str) -> None:
    assert contract.covers(subject), f"{subject} is not in nrt.adapters.bus.contract.CHANNELS"


def test_every_event_type_has_its_publishers() -> None:
    assert set(contract.EVENT_PUBLISHERS) == {t.__name__ for t in EVENT_TYPES}


def test_an_event_subject_carries_only_the_types_its_service_may_publish() -> None:
    assert contract.may_carry("nrt.events.cluster_state.ManifestApplied", "ManifestApplied")
    assert not contract.may_carry("nrt.events.specialist_worker.ManifestApplied", "ManifestApplied")
    assert not contract.may_carry("nrt.events.cluster_state.ManifestApplied", "RequestAdmitted")  # type mismatch
    assert not contract.may_carry("nrt.events.ManifestApplied", "ManifestApplied")  # no publisher in the subject
    assert not contract.may_carry("nrt.events.nobody.ManifestApplied", "ManifestApplied")
    assert subjects.event_origin("nrt.events.api_gateway.RequestAdmitted") == ("api_gateway", "RequestAdmitted")
    assert subjects.event_origin("nrt.route") is None
    with pytest.raises(ValueError, match="RouterFired"):
        contract.first_publisher("RouterFired")


def test_the_asyncapi_document_lists_every_channel_with_each_party() -> None:
    document = contract.asyncapi()
    assert document["asyncapi"] == "3.0.0"
    addresses = {c["address"] for c in document["channels"].values()}
    operations = document["operations"]
    for channel in contract.CHANNELS:
        assert channel.address in addresses
        for service in channel.subscribers:
            op = operations[f"{service} receives {channel.address}"]
            assert op["action"] == "receive"
        for service in channel.publishers:
            assert operations[f"{service} sends {channel.address}"]["action"] == "send"
    schemas = document["components"]["schemas"]
    promote = next(s for name, s in schemas.items() if name.startswith("cluster_state receives nrt.models.promote"))
    assert set(promote["properties"]) >= {"model_id", "reason", "worker_id", "manifest_version"}
    assert promote["required"] == ["model_id"]
    assert "ErrorFrame" in schemas


HANDLERS: dict[str, Callable[..., Any]] = {
    subjects.STATE: ClusterStateService.serve_state,
    subjects.STATE_SNAPSHOT: ClusterStateService.serve_snapshot,
    subjects.MANIFEST_APPLY: ClusterStateService.apply,
    subjects.MANIFEST_WHATIF: ClusterStateService.what_if,
    subjects.PROMOTE: ClusterStateService.promote,
    subjects.KEYS_CREATE: ClusterStateService.create_key,
    subjects.KEYS_REVOKE: ClusterStateService.revoke_key,
    subjects.WORKER_HEARTBEAT: Controller.on_heartbeat,
}


@pytest.mark.parametrize("subject", sorted(HANDLERS))
def test_faststream_handlers_take_and_answer_what_the_contract_says(subject: str) -> None:
    channel = contract.channel(subject)
    hints = get_type_hints(HANDLERS[subject])
    returned = hints.pop("return")
    (taken,) = hints.values()
    assert taken is channel.payload
    assert returned is (channel.reply if channel.reply is not None else type(None))


def test_the_gateway_serves_the_contract_beside_the_openapi_schema() -> None:
    from litestar.testing import TestClient

    from api_gateway.app import create_app

    with TestClient(create_app()) as client:
        served = client.get("/schema/asyncapi.json")
        assert served.status_code == 200
        assert served.json()["channels"].keys() == contract.asyncapi()["channels"].keys()
        assert client.get("/schema/openapi.json").status_code == 200
