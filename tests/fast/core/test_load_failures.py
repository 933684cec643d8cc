"""A model that cannot load: the fold keeps each worker's last failure of it, and the readiness rule
says when it has failed on every live worker that could hold it (``nrt.core.routing.readiness``)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import httpx
import msgspec
import pytest
from click.testing import CliRunner
from rich.console import Console

from nrt.core.events import Event, ModelPlaced, TierChanged, WorkerJoined, WorkerLost, decode, encode
from nrt.core.manifest import Manifest, parse_manifest
from nrt.core.routing.readiness import models_readiness, required_models
from nrt.core.state import ClusterState, LoadFailure, fold
from nrt.core.vocabulary import Reason, Tier, WorkerRole
from nrt.entrypoints.cli import client
from nrt.entrypoints.cli.status_view import last_failures, status_view
from nrt.entrypoints.cli.up import ModelsFailed, readiness_problem

T0 = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
MISSING = "hf://nobody/missing"
UNRESOLVABLE = "unresolvable_source: source 'hf://nobody/missing': the hf:// scheme cannot be fetched here"

MANIFEST = """\
cluster: shop
models:
  router:
    source: catalogue://tiny-llama
    intents: {billing: ["charged twice"], shipping: ["where is my parcel"], legal: ["the contract"]}
  specialists:
    - {id: billing, source: "hf://nobody/missing"}
    - {id: shipping, source: catalogue://tiny-llama}
    - {id: archive, source: catalogue://tiny-llama}
fallback: {source: catalogue://tiny-llama}
routing:
  entry: router
  dispatch_rule: router.output.intent -> specialists.{intent}
"""


def manifest(text: str = MANIFEST) -> Manifest:
    return parse_manifest(text, "shop.yaml")


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def joined(worker_id: str, when: float = 0, role: WorkerRole = WorkerRole.SPECIALIST) -> WorkerJoined:
    return WorkerJoined(occurred_at=at(when), worker_id=worker_id, host="h", cpu_count=2, ram_bytes=1 << 30, role=role)


def placed(model_id: str, worker_id: str, when: float, artifact: str = MISSING) -> ModelPlaced:
    return ModelPlaced(
        occurred_at=at(when), model_id=model_id, worker_id=worker_id, artifact=artifact, tier=Tier.RESIDENT,
        manifest_version=1,
    )  # fmt: skip


def loaded(model_id: str, worker_id: str, when: float) -> TierChanged:
    return TierChanged(
        occurred_at=at(when), model_id=model_id, worker_id=worker_id, from_tier=Tier.UNLOADED, to_tier=Tier.RESIDENT,
        reason=Reason.PLACEMENT, elapsed_ms=5.0, bytes_held=100,
    )  # fmt: skip


def failed(model_id: str, worker_id: str, when: float, error: str | None = UNRESOLVABLE) -> TierChanged:
    return TierChanged(
        occurred_at=at(when), model_id=model_id, worker_id=worker_id, from_tier=Tier.UNLOADED, to_tier=Tier.UNLOADED,
        reason=Reason.LOAD_FAILED, elapsed_ms=1.0, bytes_held=0, error=error,
    )  # fmt: skip


SOURCES = {"router": "catalogue://tiny-llama", "billing": MISSING}  # the others: catalogue://tiny-llama


def served_except(missing: str, *workers: str) -> list[Event]:
    """The router loaded on router host r1, every other model but ``missing`` on the first of ``workers``."""
    events: list[Event] = [joined("r1", role=WorkerRole.ROUTER), *(joined(w) for w in workers)]
    for model_id in ("router", "billing", "shipping", "archive", "fallback"):
        host = "r1" if model_id == "router" else workers[0]
        if model_id != missing:
            events += [
                placed(model_id, host, 1, SOURCES.get(model_id, "catalogue://tiny-llama")),
                loaded(model_id, host, 2),
            ]
    return events


def test_the_fold_keeps_each_workers_last_failure_until_it_loads_the_model_or_joins_again() -> None:
    state = fold([joined("w1"), joined("w2"), placed("billing", "w1", 1), failed("billing", "w1", 2)])
    assert state.models["billing"].placements == {}
    assert state.models["billing"].load_failures == {
        "w1": LoadFailure(worker_id="w1", artifact=MISSING, error=UNRESOLVABLE, at=at(2))
    }
    state = fold([placed("billing", "w1", 20), failed("billing", "w1", 21, "RuntimeError: out of memory")], state)
    assert state.models["billing"].load_failures["w1"].error == "RuntimeError: out of memory"  # the last one
    state = fold([placed("billing", "w2", 22), failed("billing", "w2", 23)], state)
    last = state.models["billing"].last_failure
    assert last is not None
    assert (last.worker_id, last.at) == ("w2", at(23))
    assert set(fold([loaded("billing", "w2", 30)], state).models["billing"].load_failures) == {"w1"}
    assert set(fold([joined("w1", 31)], state).models["billing"].load_failures) == {"w2"}
    assert set(fold([WorkerLost(occurred_at=at(32), worker_id="w1", reason=Reason.SHUTDOWN)], state).models[
        "billing"
    ].load_failures) == {"w1", "w2"}  # fmt: skip  # a lost worker's failure is still the last word on it


def test_a_version_1_failed_load_decodes_and_folds_with_no_reason() -> None:
    body = msgspec.json.decode(encode(failed("billing", "w1", 2)))
    del body["error"]
    old = decode(msgspec.json.encode(body), version=1)
    assert isinstance(old, TierChanged)
    assert old.error is None
    state = fold([joined("w1"), placed("billing", "w1", 1), old])
    assert state.models["billing"].load_failures["w1"].error == ""
    current = failed("billing", "w1", 2)
    assert decode(encode(current), version=1) == current  # a version 2 body read as version 1 keeps its error


def test_required_models_are_the_entry_and_what_the_dispatch_rule_reaches() -> None:
    # legal has no specialist: it goes to the fallback; archive is no label of the router
    assert required_models(manifest()) == {"router", "billing", "shipping", "fallback"}
    fixed = MANIFEST.replace("specialists.{intent}", "specialists.shipping")
    assert required_models(manifest(fixed)) == {"router", "shipping"}
    no_fallback = MANIFEST.replace("fallback: {source: catalogue://tiny-llama}\n", "")
    assert required_models(manifest(no_fallback)) == {"router", "billing", "shipping"}


def test_a_model_has_failed_once_every_live_worker_that_could_hold_it_failed_its_source() -> None:
    shop = manifest()
    state = fold([*served_except("billing", "w1", "w2"), placed("billing", "w1", 3), failed("billing", "w1", 4)])
    models = models_readiness(state, shop)
    assert (models.waiting, models.failed, models.ready) == (("billing",), (), False)  # w2 may still load it
    assert models.describe() == "no live worker serves billing yet"
    state = fold([placed("billing", "w2", 5), failed("billing", "w2", 6)], state)
    models = models_readiness(state, shop)
    assert models.waiting == ()
    [billing] = models.failed
    assert (billing.model_id, billing.required, billing.failure.worker_id) == ("billing", True, "w2")
    assert models.given_up == (billing,)
    assert not models.ready
    assert models.describe() == f"billing could not be loaded on w2: {UNRESOLVABLE}"
    # a retry placement does not lift the failure; a retry that loads it does
    retried = fold([placed("billing", "w1", 40)], state)
    assert [f.model_id for f in models_readiness(retried, shop).failed] == ["billing"]
    assert models_readiness(fold([loaded("billing", "w1", 41)], retried), shop).ready
    # a new worker that could hold it, or one joining anew, has not failed it yet
    assert models_readiness(fold([joined("w3", 50)], state), shop).waiting == ("billing",)
    assert models_readiness(fold([joined("w1", 50)], state), shop).waiting == ("billing",)
    # a lost worker no longer counts: w1's failure alone is enough once w2 is gone
    w2_lost = fold([WorkerLost(occurred_at=at(60), worker_id="w2", reason=Reason.HEARTBEAT_TIMEOUT)], state)
    assert [f.failure.worker_id for f in models_readiness(w2_lost, shop).failed] == ["w1"]


def test_only_failures_of_the_source_in_force_on_workers_of_its_role_and_device_count() -> None:
    state = fold([*served_except("billing", "w1"), placed("billing", "w1", 3), failed("billing", "w1", 4)])
    assert [f.model_id for f in models_readiness(state, manifest()).failed] == ["billing"]
    fixed_source = manifest(MANIFEST.replace('"hf://nobody/missing"', "catalogue://tiny-llama"))
    assert models_readiness(state, fixed_source).waiting == ("billing",)  # the new source has not failed
    on_gpu = manifest(MANIFEST.replace('source: "hf://nobody/missing"}', 'source: "hf://nobody/missing", device: gpu}'))
    assert models_readiness(state, on_gpu).waiting == ("billing",)  # w1 has no GPU: it waits for one that has
    # the entry model's hosts are the router hosts
    router_failed = fold(
        [joined("r1", role=WorkerRole.ROUTER), placed("router", "r1", 1, SOURCES["router"]), failed("router", "r1", 2)]
    )
    [router] = models_readiness(router_failed, manifest()).failed
    assert (router.model_id, router.required) == ("router", True)
    assert models_readiness(ClusterState(), manifest()).failed == ()  # no worker yet: nothing has failed


def test_a_model_no_routed_request_reaches_does_not_hold_readiness_back() -> None:
    state = fold([*served_except("archive", "w1"), placed("archive", "w1", 3, "catalogue://tiny-llama")])
    assert models_readiness(state, manifest()).waiting == ("archive",)  # every model is awaited at first
    models = models_readiness(fold([failed("archive", "w1", 4, "OSError: disk")], state), manifest())
    assert [(f.model_id, f.required) for f in models.failed] == [("archive", False)]
    assert models.ready  # reported in ``failed``, not waited for
    assert models.describe() == "ok"


def test_nrt_up_gives_up_when_the_gateway_names_a_required_model_that_failed() -> None:
    failure = {
        "model": "billing",
        "required": True,
        "worker_id": "w1",
        "error": UNRESOLVABLE,
        "at": "2026-05-01T12:00:00Z",
    }
    optional = {**failure, "model": "archive", "required": False, "error": "OSError: disk"}

    def answer(failed: list[dict[str, object]]) -> httpx.MockTransport:
        body = {"status": "not_ready", "checks": {"models": "..."}, "instance": "ours", "failed": failed}
        return httpx.MockTransport(lambda _: httpx.Response(503, json=body))

    async def problem(failed: list[dict[str, object]]) -> str | None:
        async with httpx.AsyncClient(transport=answer(failed)) as http:
            return await readiness_problem(http, "http://gw", "ours")

    assert asyncio.run(problem([optional])) is not None  # not ready, still waiting: no reason to give up
    with pytest.raises(ModelsFailed) as given_up:
        asyncio.run(problem([optional, failure]))
    message = given_up.value.message
    assert f"billing (on w1): {UNRESOLVABLE}" in message
    assert "archive" not in message


def cluster_json() -> dict[str, object]:
    state = fold([*served_except("billing", "w1"), placed("billing", "w1", 3), failed("billing", "w1", 4)])
    state = fold([placed("archive", "w1", 5), failed("archive", "w1", 6, "OSError: disk")], state)
    decoded: dict[str, object] = msgspec.json.decode(msgspec.json.encode(state))
    return decoded


def test_nrt_status_shows_each_models_last_load_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    state = cluster_json()
    assert [(f["model_id"], f["error"]) for f in last_failures(state)] == [
        ("archive", "OSError: disk"),
        ("billing", UNRESOLVABLE),
    ]  # the latest first

    def get(url: str, **_: object) -> httpx.Response:
        return httpx.Response(200, json=state, request=httpx.Request("GET", url))

    monkeypatch.setattr(httpx, "get", get)
    result = CliRunner().invoke(client.status, ["--url", "http://gateway.test", "--api-key", "k"])
    assert result.exit_code == 0, result.output
    assert "load failures (the last per model)" in result.output
    assert f"billing on w1, 0s ago: {UNRESOLVABLE}" not in result.output  # its age is real time, not T0
    assert "billing on w1, " in result.output
    assert f"ago: {UNRESOLVABLE}" in result.output

    console = Console(width=200, record=True)
    console.print(status_view(state, "cluster_state", now=at(60)))
    drawn = console.export_text()
    row = next(line for line in drawn.splitlines() if "archive" in line and "OSError" in line)
    assert [cell.strip() for cell in row.split("│")[1:-1]] == ["archive", "w1", "54s", "OSError: disk"]
