"""Placement by device, without any server: a model whose manifest asks for a GPU goes only to
workers with one (and one that asks for the CPU only to workers without); with none live it is
refused with the reason, and placed once such a worker joins. Residents on a GPU count the
device bytes their worker measured."""

from __future__ import annotations

from cluster_helpers import GB, T0, applied, at, joined, manifest_text, placed, router_host, view
from nrt.core.device import Device
from nrt.core.events import WorkerJoined
from nrt.core.manifest import DeviceRequirement, Manifest, parse_manifest
from nrt.core.policies import Control, Emit, Refuse, SwapRejected, Tick, check_fit, decide, plan_swap, saw_heartbeat
from nrt.core.protocol import WorkerHeartbeat
from nrt.core.vocabulary import DeviceKind, WorkerRole

H100 = Device(kind=DeviceKind.CUDA, id="GPU-5f1c", name="NVIDIA H100 80GB HBM3", total_bytes=80 * GB)


def with_device(text: str, model_id: str, device: str) -> str:
    """``text`` with ``device: <device>`` declared for ``model_id`` (a specialist, or the router)."""
    if model_id == "router":
        anchor = "  router:\n    source: /models/router\n"
        return text.replace(anchor, f"{anchor}    device: {device}\n")
    anchor = f"    - id: {model_id}\n      source: /models/{model_id}\n"
    assert anchor in text
    return text.replace(anchor, f"{anchor}      device: {device}\n")


def devices_manifest(**devices: str) -> Manifest:
    text = manifest_text(gpu="8GB")
    for model_id, device in devices.items():
        text = with_device(text, model_id, device)
    return parse_manifest(text, "devices.yaml")


def gpu_worker(worker_id: str, accelerator: int = 8 * GB, role: WorkerRole = WorkerRole.SPECIALIST) -> WorkerJoined:
    event = joined(worker_id, ram=16 * GB, accelerator=accelerator, role=role)
    device = Device(kind=DeviceKind.CUDA, id=f"GPU-{worker_id}", name="NVIDIA L4", total_bytes=accelerator)
    return WorkerJoined(**{**_fields(event), "device": device})


def _fields(event: WorkerJoined) -> dict[str, object]:
    return {name: getattr(event, name) for name in event.__struct_fields__}


def loads(commands: list) -> dict[str, str]:  # type: ignore[type-arg]
    """model id -> the worker told to load it."""
    return {c.command.model_id: c.worker_id for c in commands if isinstance(c, Control) and c.command.action == "load"}


def test_the_manifest_device_key_is_parsed_with_any_by_default() -> None:
    m = devices_manifest(billing="gpu", legal="cpu")
    assert m.model("billing").device is DeviceRequirement.GPU
    assert m.model("legal").device is DeviceRequirement.CPU
    assert m.model("technical").device is DeviceRequirement.ANY


def test_a_gpu_model_goes_only_to_a_gpu_worker_and_a_cpu_model_only_to_a_cpu_worker() -> None:
    m = devices_manifest(billing="gpu", technical="gpu", legal="cpu")
    # w0 (CPU) has the most room: without the device keys every specialist could go there
    workers = [joined("w0", ram=64 * GB), gpu_worker("w1"), router_host("r1")]
    state = view([applied(m), *workers], heartbeats=["w0", "w1", "r1"])
    commands = decide(state, m, Tick(), T0)
    assert loads(commands) == {"router": "r1", "billing": "w1", "technical": "w1", "legal": "w0"}
    assert not [c for c in commands if isinstance(c, Refuse)]


def test_a_gpu_model_with_no_gpu_worker_is_refused_with_the_reason_and_placed_once_one_joins() -> None:
    m = devices_manifest(billing="gpu")
    history = [applied(m), joined("w0", ram=64 * GB), joined("w2", ram=64 * GB), router_host("r1")]
    state = view(history, heartbeats=["w0", "w2", "r1"])
    commands = decide(state, m, Tick(), T0)
    assert "billing" not in loads(commands)  # the others are placed; billing waits
    assert set(loads(commands)) == {"router", "technical", "legal"}
    refusals = [c for c in commands if isinstance(c, Refuse)]
    assert [(r.model_id, r.code) for r in refusals] == [("billing", "unplaceable")]
    assert refusals[0].reason == (
        "cannot place billing (resident, 1 GB): w0 has no GPU (billing asks for device: gpu); "
        "w2 has no GPU (billing asks for device: gpu)"
    )
    # a GPU worker joins: billing goes there at the next tick
    later = view([*history, gpu_worker("w1")], now=at(1), heartbeats=["w0", "w1", "w2", "r1"])
    assert loads(decide(later, m, Tick(), at(1)))["billing"] == "w1"


def test_a_cpu_model_is_refused_by_gpu_workers() -> None:
    m = devices_manifest(legal="cpu")
    state = view([applied(m), gpu_worker("w1"), router_host("r1")], heartbeats=["w1", "r1"])
    refusals = [c for c in decide(state, m, Tick(), T0) if isinstance(c, Refuse)]
    assert [r.reason for r in refusals] == [
        "cannot place legal (standby, 1 GB): w1 has a GPU (legal asks for device: cpu)"
    ]


def test_an_entry_model_on_gpu_goes_only_to_router_hosts_with_one() -> None:
    m = devices_manifest(router="gpu")
    hosts = [router_host("r1"), gpu_worker("r2", role=WorkerRole.ROUTER), joined("w1")]
    state = view([applied(m), *hosts], heartbeats=["r1", "r2", "w1"])
    commands = decide(state, m, Tick(), T0)
    routers = [c.worker_id for c in commands if isinstance(c, Control) and c.command.model_id == "router"]
    assert routers == ["r2"]
    refusals = [c.reason for c in commands if isinstance(c, Refuse)]
    assert refusals == [
        "cannot place router (resident, 1 GB) on a router host: r1 has no GPU (router asks for device: gpu)"
    ]


def test_a_manifest_asking_for_a_gpu_the_live_workers_lack_does_not_fit() -> None:
    old = parse_manifest(manifest_text(gpu="8GB"), "old.yaml")
    history = [
        applied(old),
        joined("w1"),
        router_host("r1"),
        *placed("router", "r1", "resident"),
        *placed("billing", "w1", "resident"),
        *placed("technical", "w1", "resident"),
        *placed("legal", "w1", "standby"),
    ]
    state = view(history, heartbeats=["w1", "r1"])
    assert check_fit(state, old, T0) == []
    contracts = "    - id: contracts\n      source: /models/contracts\n      device: gpu\n      footprint: 1GB\n"
    new = parse_manifest(manifest_text(gpu="8GB").replace("\nrouting:", "\n" + contracts + "routing:"), "new.yaml")
    plan = plan_swap(state, old, new, T0, "swap-1")
    assert isinstance(plan, SwapRejected)
    assert plan.message == (
        "the new manifest does not fit: cannot place contracts (resident, 1 GB): w1 has no GPU "
        "(contracts asks for device: gpu)"
    )


def test_a_resident_on_a_gpu_counts_the_device_bytes_its_worker_measured() -> None:
    m = devices_manifest(billing="gpu", technical="gpu")
    history = [
        applied(m),
        gpu_worker("w1", accelerator=3 * GB),
        router_host("r1"),
        *placed("router", "r1", "resident"),
        *placed("billing", "w1", "resident", size=5 * GB // 2),  # measured on the GPU: 2.5 GB, not the 1 GB declared
    ]
    state = view(history, heartbeats=["w1", "r1"])
    commands = decide(state, m, Tick(), T0)
    refusals = {r.model_id: r.reason for r in commands if isinstance(r, Refuse)}
    assert refusals["technical"] == (
        "cannot place technical (resident, 1 GB): w1 has 500 MB free of 3 GB accelerator memory "
        "and 16 GB free of 16 GB RAM"
    )


def test_the_fold_and_a_heartbeat_announcement_carry_the_device() -> None:
    m = devices_manifest(billing="gpu")
    state = view([applied(m), gpu_worker("w1", accelerator=80 * GB)], heartbeats=["w1"])
    assert state.cluster.workers["w1"].device == Device(
        kind=DeviceKind.CUDA, id="GPU-w1", name="NVIDIA L4", total_bytes=80 * GB
    )
    assert state.cluster.workers["w1"].accelerator
    # a worker the log does not know is announced from its heartbeats, its device with it
    beat = WorkerHeartbeat(
        worker_id="w9",
        host="w9",
        cpu_count=8,
        ram_bytes=64 * GB,
        accelerator_bytes=H100.total_bytes,
        providers=("CUDAExecutionProvider", "CPUExecutionProvider"),
        device=H100,
        device_free_bytes=79 * GB,
    )
    for second in (0, 1, 2, 3):
        state = saw_heartbeat(state, beat, at(second))
    announced = [c.event for c in decide(state, m, Tick(), at(3)) if isinstance(c, Emit)]
    joined_w9 = [e for e in announced if isinstance(e, WorkerJoined)]
    assert [(e.worker_id, e.device, e.accelerator_bytes) for e in joined_w9] == [("w9", H100, 80 * GB)]
