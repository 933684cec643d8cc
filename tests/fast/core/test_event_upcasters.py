"""Every older version of every event type has an upcaster; the codec reads older bodies through them."""

from __future__ import annotations

import msgspec
import pytest

from nrt.adapters.bus.jetstream import event_headers, message_version
from nrt.core.device import Device
from nrt.core.events import (
    EVENT_TYPES,
    UPCASTERS,
    VERSION_HEADER,
    EventDecodeError,
    RequestCompleted,
    TierChanged,
    Weights,
    WorkerJoined,
    decode,
    encode,
    upcast,
)
from nrt.core.events.upcasters import missing_upcasters
from nrt.core.vocabulary import DeviceKind, Reason, Tier, WorkerRole

V1_JOINED = (
    b'{"cpu_count":1,"event_id":"0d5c2a8e-6f3b-4c1e-9a7d-000000000002","host":"h",'
    b'"occurred_at":"2026-01-01T00:00:00Z","ram_bytes":8,"type":"WorkerJoined","worker_id":"w"}'
)


def test_every_older_version_has_an_upcaster() -> None:
    versions = {cls.__name__: cls.VERSION for cls in EVENT_TYPES}
    assert missing_upcasters(versions) == []
    assert missing_upcasters({"Renamed": 3}, {("Renamed", 1): dict}) == ["Renamed v2"]
    assert set(UPCASTERS) <= {(name, v) for name, current in versions.items() for v in range(1, current)}


def test_a_v1_body_decodes_through_its_upcaster() -> None:
    joined = decode(V1_JOINED, version=1)
    assert isinstance(joined, WorkerJoined)
    assert joined.role == WorkerRole.SPECIALIST
    router = WorkerJoined(worker_id="r", host="h", cpu_count=1, ram_bytes=1, role=WorkerRole.ROUTER)
    assert decode(encode(router), version=1) == router  # an upcaster keeps what a later body has
    assert decode(encode(router), version=2) == decode(encode(router)) == router


def test_a_v2_worker_joined_gets_the_device_its_accelerator_bytes_imply() -> None:
    def v2(**fields: object) -> bytes:
        joined = WorkerJoined(worker_id="w", host="h", cpu_count=1, ram_bytes=8 << 30, role=WorkerRole.ROUTER)
        body = {**msgspec.json.decode(encode(joined)), **fields}
        del body["device"]  # a version 2 body has none
        return msgspec.json.encode(body)

    gpu = decode(v2(accelerator_bytes=80 << 30, providers=["CUDAExecutionProvider"]), version=2)
    assert isinstance(gpu, WorkerJoined)
    assert gpu.device == Device(kind=DeviceKind.CUDA, id="", name="", total_bytes=80 << 30)
    assert gpu.role == WorkerRole.ROUTER  # the earlier fields are kept
    cpu = decode(v2(), version=2)
    assert isinstance(cpu, WorkerJoined)
    assert cpu.device == Device(kind=DeviceKind.CPU, id="", name="", total_bytes=8 << 30)  # the RAM it offered
    v1 = decode(V1_JOINED, version=1)
    assert isinstance(v1, WorkerJoined)
    assert v1.device == Device(kind=DeviceKind.CPU, id="", name="", total_bytes=8)
    h100 = Device(kind=DeviceKind.CUDA, id="GPU-1", name="NVIDIA H100", total_bytes=80 << 30)
    current = WorkerJoined(worker_id="w", host="h", cpu_count=1, ram_bytes=1, accelerator_bytes=80 << 30, device=h100)
    assert WorkerJoined.VERSION == 3
    assert decode(encode(current), version=2) == decode(encode(current)) == current  # a later body keeps its device


def test_a_v2_tier_change_decodes_without_weights_and_a_v3_one_keeps_them() -> None:
    load = TierChanged(
        model_id="m",
        worker_id="w",
        from_tier=Tier.UNLOADED,
        to_tier=Tier.STANDBY,
        reason=Reason.PLACEMENT,
        elapsed_ms=1.0,
        bytes_held=1,
        weights=Weights(source="hf://a/b@c", sha256="d", provider="cpu", quantization="int8-dynamic", bytes=1),
    )
    body = msgspec.json.decode(encode(load))
    del body["weights"]  # a version 2 body has none
    older = decode(msgspec.json.encode(body), version=2)
    assert isinstance(older, TierChanged)
    assert older.weights is None
    assert TierChanged.VERSION == 3
    assert decode(encode(load), version=2) == decode(encode(load)) == load  # a later body keeps its weights


def test_upcasting_applies_each_step_in_order() -> None:
    steps = {("Thing", 1): lambda b: {**b, "a": 1}, ("Thing", 2): lambda b: {"b": b.pop("a") + 1, **b}}
    assert upcast("Thing", 1, 3, {"x": 0}, steps) == {"b": 2, "x": 0}
    assert upcast("Thing", 3, 3, {"x": 0}, steps) == {"x": 0}


def test_unreadable_versions_are_named() -> None:
    with pytest.raises(EventDecodeError, match="WorkerJoined version 4 is newer than this code reads"):
        decode(V1_JOINED, version=4)
    with pytest.raises(EventDecodeError, match="no upcaster reads ApiKeyRevoked version 0"):
        decode(b'{"type":"ApiKeyRevoked","key_id":"k"}', version=0)
    with pytest.raises(EventDecodeError, match="it has no type"):
        decode(b'{"key_id":"k"}', version=1)


def test_messages_carry_their_schema_version() -> None:
    completed = RequestCompleted(
        request_id="r", manifest_version=1, model_id="m", prompt_tokens=1, completion_tokens=1, latency_ms=1.0
    )
    headers = event_headers(completed)
    assert headers[VERSION_HEADER] == "2"
    assert headers["Nats-Msg-Id"] == completed.event_id
    assert message_version(headers) == 2
    assert message_version(None) == 1  # published before events carried their version
    with pytest.raises(EventDecodeError, match="not a version number"):
        message_version({VERSION_HEADER: "two"})
