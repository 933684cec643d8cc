"""Routing benchmark: how well the encoder router keeps in-scope requests and sends the rest to the fallback.

A labelled set (``bench/data/routing-assistant.yaml`` by default: 8 intents with 10 example
utterances each, 20 held-out test utterances per intent and 100 out-of-scope requests) becomes
a manifest: the router is the real MiniLM catalogue model (``catalogue://minilm-l6``) with the
examples as its ``intents``, one specialist per intent, and a fallback. Every test utterance
then goes through what the worker and router_svc do: the embedding of the request (one at a
time, as requests arrive), a decision rule over the example index (``nrt.hosting.embeddings.rules``), the
floor (``nrt.hosting.embeddings.calibration`` from the examples only; or a fixed 0.35; or none) and the
manifest's dispatch rule (``nrt.core.routing.choose_route``).

Per decision rule x threshold it prints in-scope accuracy (the request reached its intent's
specialist), out-of-scope recall (an out-of-scope request reached the fallback), fallback
precision (of the requests the fallback got, the share that were out of scope) and the
router's time per request (embedding plus rule, single requests on this machine's CPU).
``--resample N`` repeats the calibrated router rule on N random splits of each intent's
utterances into examples and tests, to show how much the figures depend on which
utterances are the examples.

Last, the figures ``routing.sticky_margin`` is chosen from (``nrt.core.routing.affinity``): for the
calibrated router rule and each margin, the share of follow-ups on the same topic answered by the
conversation's specialist (the previous specialist is the utterance's own intent: a margin keeps a
turn the router alone would misroute), and the share of topic changes that reach the new specialist
(the previous specialist is each other intent: a margin holds back a turn that should move). The
margin with the best mean of the two is the default (ties: the smaller one).

    python -m bench.routing [--data bench/data/routing-assistant.yaml] [--fixed 0.35] [--resample 0]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time
from collections.abc import Sequence
from pathlib import Path

import msgspec
import numpy as np
import yaml

from nrt.adapters.catalogue import prepare
from nrt.adapters.inference import Encoder
from nrt.core.manifest import Manifest, parse_manifest
from nrt.core.protocol import Calibration
from nrt.core.routing import (
    choose_route,
    examples_digest,
    intent_examples,
    stay_on_specialist,
    threshold_in_force,
)
from nrt.hosting.embeddings.calibration import calibrate
from nrt.hosting.embeddings.index import FloatArray, IntentIndex, build_index
from nrt.hosting.embeddings.rules import ROUTER_RULE, RULES, Rule, score

DATA = Path(__file__).parent / "data" / "routing-assistant.yaml"
ROUTER = "minilm-l6"
TARGET_IN_SCOPE = 0.93
TARGET_OUT_OF_SCOPE = 0.80
THRESHOLDS = ("calibrated", "fixed", "none")


class LabelledIntent(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    examples: tuple[str, ...]  # the manifest's intents: all the router (and its calibration) sees
    test: tuple[str, ...]  # held out


class RoutingSet(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    intents: dict[str, LabelledIntent]
    out_of_scope: tuple[str, ...]


class Outcome(msgspec.Struct, frozen=True, kw_only=True):
    in_scope: float  # share of in-scope requests answered by their intent's specialist
    out_of_scope: float  # share of out-of-scope requests answered by the fallback
    precision: float | None  # share of the fallback's requests that were out of scope; None: it got none


def load_set(path: Path) -> RoutingSet:
    """The labelled set; raises ValueError naming the problem (a shape error, a test utterance that is an example)."""
    try:
        data = msgspec.yaml.decode(path.read_bytes(), type=RoutingSet)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise ValueError(f"{path}: {exc}") from exc
    examples = {text for intent in data.intents.values() for text in intent.examples}
    for label, intent in data.intents.items():
        if not intent.examples or not intent.test:
            raise ValueError(f"{path}: intents.{label} needs examples and test utterances")
        if leaked := examples.intersection(intent.test):
            raise ValueError(f"{path}: intents.{label}.test repeats examples: {sorted(leaked)}")
    if leaked := examples.intersection(data.out_of_scope):
        raise ValueError(f"{path}: out_of_scope repeats examples: {sorted(leaked)}")
    return data


def manifest_for(examples: dict[str, tuple[str, ...]], threshold: float | None) -> Manifest:
    """The benchmark's cluster: MiniLM routes to one specialist per intent; a fallback answers the rest."""
    router: dict[str, object] = {
        "source": f"catalogue://{ROUTER}",
        "intents": {k: list(v) for k, v in examples.items()},
    }
    if threshold is not None:
        router["confidence_threshold"] = threshold
    text = yaml.safe_dump(
        {
            "cluster": "routing-bench",
            "models": {
                "router": router,
                "specialists": [{"id": label, "source": "catalogue://tiny-llama"} for label in examples],
            },
            "fallback": {"source": "catalogue://tiny-llama"},
            "routing": {"entry": "router", "dispatch_rule": "router.output.intent -> specialists.{intent}"},
        },
        sort_keys=False,
    )
    return parse_manifest(text, "routing-bench manifest")


def evaluate(
    manifest: Manifest,
    index: IntentIndex,
    rule: Rule,
    calibration: Calibration | None,
    tests: Sequence[tuple[str, FloatArray]],
    out_of_scope: Sequence[FloatArray],
) -> Outcome:
    """Route every test vector as router_svc would, and count where each one went."""
    fallback = manifest.dispatch_target(None)
    hits = sum(choose_route(manifest, score(index, v, rule), calibration).target == label for label, v in tests)
    misrouted_in = sum(choose_route(manifest, score(index, v, rule), calibration).target == fallback for _, v in tests)
    caught = sum(choose_route(manifest, score(index, v, rule), calibration).target == fallback for v in out_of_scope)
    sent = caught + misrouted_in
    return Outcome(
        in_scope=hits / len(tests), out_of_scope=caught / len(out_of_scope), precision=caught / sent if sent else None
    )


def rule_ms(index: IntentIndex, rule: Rule, vectors: Sequence[FloatArray]) -> float:
    started = time.perf_counter()
    for vector in vectors:
        score(index, vector, rule)
    return (time.perf_counter() - started) * 1e3 / len(vectors)


def embed_one_by_one(encoder: Encoder, texts: Sequence[str]) -> tuple[list[FloatArray], list[float]]:
    """Each text's embedding, as a single request, and the milliseconds each took."""
    vectors, times = [], []
    for text in texts:
        started = time.perf_counter()
        vectors.append(encoder.embed([text])[0])
        times.append((time.perf_counter() - started) * 1e3)
    return vectors, times


def row(rule: str, threshold: str, value: float, outcome: Outcome, ms: float) -> str:
    precision = f"{outcome.precision:.3f}" if outcome.precision is not None else "-"
    return (
        f"{rule:<14}{threshold:<12}{value:>7.3f}{outcome.in_scope:>11.3f}{outcome.out_of_scope:>15.3f}"
        f"{precision:>16}{ms:>14.2f}"
    )


STICKY_MARGINS = (0.0, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3)


def sticky_margins(
    manifest: Manifest,
    index: IntentIndex,
    calibration: Calibration | None,
    tests: Sequence[tuple[str, FloatArray]],
) -> float:
    """Print, per margin, how follow-ups and topic changes fare; return the margin with the best mean."""
    decisions = [(label, choose_route(manifest, score(index, v, ROUTER_RULE), calibration)) for label, v in tests]
    labels = manifest.intent_labels
    print(f"\nsticky margin ({ROUTER_RULE}, calibrated): follow-ups kept on their specialist, topic changes moved")
    best: tuple[float, float] | None = None
    for margin in STICKY_MARGINS:
        sticky = dataclasses.replace(manifest, routing=dataclasses.replace(manifest.routing, sticky_margin=margin))
        same = [stay_on_specialist(sticky, d, label).target == label for label, d in decisions]
        moves = [
            stay_on_specialist(sticky, d, previous).target == label
            for label, d in decisions
            for previous in labels
            if previous != label
        ]
        kept, moved = sum(same) / len(same), sum(moves) / len(moves)
        mean = (kept + moved) / 2
        print(f"  margin {margin:.2f}: follow-ups {kept:.3f}, topic changes {moved:.3f}, mean {mean:.3f}")
        if best is None or mean > best[1]:
            best = (margin, mean)
    assert best is not None
    print(f"sticky margin with the best mean: {best[0]:.2f}")
    return best[0]


def resample(
    data: RoutingSet, vectors: dict[str, list[FloatArray]], oos: list[FloatArray], rounds: int, seed: int = 0
) -> None:
    """Each rule, calibrated, on ``rounds`` random example/test splits of each intent's utterances."""
    rng = np.random.default_rng(seed)
    outcomes: dict[Rule, list[Outcome]] = {rule: [] for rule in RULES}
    for _ in range(rounds):
        examples, tests = {}, []
        embedded: dict[str, FloatArray] = {}
        for label, intent in data.intents.items():
            texts = [*intent.examples, *intent.test]
            order = rng.permutation(len(texts))
            chosen, held = order[: len(intent.examples)], order[len(intent.examples) :]
            examples[label] = tuple(texts[i] for i in chosen)
            embedded[label] = np.stack([vectors[label][i] for i in chosen])
            tests += [(label, vectors[label][i]) for i in held]
        index = build_index(embedded)
        digest = examples_digest(intent_examples(list(examples), examples))
        manifest = manifest_for(examples, None)
        for rule in RULES:
            calibration = calibrate(index, rule, digest)
            outcomes[rule].append(evaluate(manifest, index, rule, calibration, tests, oos))
    print(f"\ncalibrated, on {rounds} random example/test splits of each intent's utterances:")
    for rule, results in outcomes.items():
        ins = [o.in_scope for o in results]
        outs = [o.out_of_scope for o in results]
        met = sum(o.in_scope >= TARGET_IN_SCOPE and o.out_of_scope >= TARGET_OUT_OF_SCOPE for o in results)
        print(
            f"  {rule:<14}in-scope mean {statistics.mean(ins):.3f} (min {min(ins):.3f}), out-of-scope to fallback "
            f"mean {statistics.mean(outs):.3f} (min {min(outs):.3f}); both targets met in {met}/{rounds}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DATA, help="the labelled set (YAML)")
    parser.add_argument("--fixed", type=float, default=0.35, help="the fixed threshold to compare with")
    parser.add_argument("--resample", type=int, default=0, help="random example/test splits to repeat the router on")
    args = parser.parse_args()

    data = load_set(args.data)
    examples = {label: intent.examples for label, intent in data.intents.items()}
    encoder = Encoder.load(prepare(ROUTER).directory)
    encoder.embed(["warm up"])
    embedded = {label: encoder.embed(list(texts)) for label, texts in examples.items()}
    index = build_index(embedded)
    digest = examples_digest(intent_examples(list(examples), examples))
    tested: dict[str, list[FloatArray]] = {}
    encode_ms: list[float] = []
    for label, intent in data.intents.items():
        tested[label], times = embed_one_by_one(encoder, intent.test)
        encode_ms += times
    oos, times = embed_one_by_one(encoder, data.out_of_scope)
    encode_ms += times
    tests = [(label, v) for label, vectors in tested.items() for v in vectors]
    manifests = {"calibrated": manifest_for(examples, None), "fixed": manifest_for(examples, args.fixed)}
    manifests["none"] = manifest_for(examples, 0.0)

    n_examples = sum(len(v) for v in examples.values())
    print(
        f"routing benchmark: {args.data.name}: {len(examples)} intents, {n_examples} examples, "
        f"{len(tests)} in-scope and {len(oos)} out-of-scope test requests; router {ROUTER} on {encoder.provider}"
    )
    print(f"encoder: {statistics.mean(encode_ms):.2f} ms per request (mean of {len(encode_ms)}, one at a time)\n")
    print(
        f"{'rule':<14}{'threshold':<12}{'value':>7}{'in-scope':>11}{'oos->fallback':>15}"
        f"{'fallback prec':>16}{'ms/request':>14}"
    )
    summary: dict[str, Outcome] = {}
    calibrations: list[str] = []
    for rule in RULES:
        started = time.perf_counter()
        calibration = calibrate(index, rule, digest)
        calibrate_ms = (time.perf_counter() - started) * 1e3
        if calibration is not None:
            calibrations.append(
                f"{rule}: threshold {calibration.threshold:.3f} from own {calibration.own:.3f} and "
                f"other {calibration.other:.3f} ({calibrate_ms:.0f} ms)"
            )
        ms = statistics.mean(encode_ms) + rule_ms(index, rule, [v for _, v in tests])
        for name in THRESHOLDS:
            manifest = manifests[name]
            outcome = evaluate(manifest, index, rule, calibration, tests, oos)
            value = threshold_in_force(manifest, calibration).value
            print(row(rule, name, value, outcome, ms))
            summary[f"{rule}/{name}"] = outcome
    print("\nleave-one-out calibration per rule (examples only):")
    for line in calibrations:
        print(f"  {line}")
    router = summary[f"{ROUTER_RULE}/calibrated"]
    met = router.in_scope >= TARGET_IN_SCOPE and router.out_of_scope >= TARGET_OUT_OF_SCOPE
    print(
        f"\nthe router ({ROUTER_RULE}, calibrated, no hand-set threshold): in-scope {router.in_scope:.3f} "
        f"(target >= {TARGET_IN_SCOPE}), out-of-scope to fallback {router.out_of_scope:.3f} "
        f"(target >= {TARGET_OUT_OF_SCOPE}): {'met' if met else 'NOT met'}"
    )
    sticky_margins(manifests["calibrated"], index, calibrate(index, ROUTER_RULE, digest), tests)
    if args.resample:
        every = {label: [*embedded[label], *tested[label]] for label in data.intents}  # examples first, then tests
        resample(data, every, oos, args.resample)


if __name__ == "__main__":
    main()
