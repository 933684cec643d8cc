"""The utterances that stand for each label of an entry model, and their digest.

The manifest's ``intents`` give each label its example utterances; a label without any
stands for itself (its name is its one example). The same pairs, in label order, are what
an encoder router embeds and calibrates from, so their digest names a calibration.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

import msgspec

from nrt.core.manifest import Manifest

IntentExamples = tuple[tuple[str, tuple[str, ...]], ...]  # (label, its example utterances), in label order


def intent_examples(labels: Sequence[str], examples: Mapping[str, Sequence[str]]) -> IntentExamples:
    """Each of ``labels`` with its examples; a label without any stands for itself."""
    return tuple((label, tuple(examples.get(label) or (label,))) for label in labels)


def router_examples(manifest: Manifest) -> IntentExamples:
    """What the manifest's entry model classifies with: its labels and their examples."""
    entry = manifest.model(manifest.routing.entry)
    return intent_examples(manifest.intent_labels, dict(entry.intents))


def examples_digest(intents: IntentExamples) -> str:
    """sha256 of the labels and their examples, in order."""
    return hashlib.sha256(msgspec.json.encode(intents)).hexdigest()
