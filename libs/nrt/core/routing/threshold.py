"""Which confidence floor is in force for a manifest's entry model, and where it comes from.

A ``confidence_threshold`` in the manifest wins. Without one, the router model's own
calibration applies (an encoder's from its examples, a label-likelihood model's "none of
these" odds), provided it was made from the labels and examples this manifest gives it.
Without either, every best label is trusted (floor 0).
"""

from __future__ import annotations

from typing import Literal, Protocol

import msgspec

from nrt.core.manifest import Manifest
from nrt.core.routing.examples import examples_digest, router_examples

ThresholdSource = Literal["manifest", "calibrated", "none"]


class CalibrationFacts(Protocol):
    """What a calibration says: ``nrt.core.protocol.Calibration`` or the ``RouterCalibrated`` event."""

    @property
    def threshold(self) -> float: ...
    @property
    def rule(self) -> str: ...
    @property
    def examples(self) -> int: ...
    @property
    def digest(self) -> str: ...


class Threshold(msgspec.Struct, frozen=True, kw_only=True):
    value: float
    source: ThresholdSource
    rule: str = ""  # calibrated: the decision rule it bounds
    examples: int = 0  # calibrated: the examples it was derived from

    def describe(self) -> str:
        """One line for people, e.g. "0.38, calibrated from 80 examples"."""
        if self.source == "manifest":
            return f"{self.value:.2f}, set in the manifest"
        if self.source == "none":
            return "none yet: the router model calibrates one from its examples when it loads them"
        if self.rule == "likelihood":
            odds = self.value / (1.0 - self.value) if self.value < 1.0 else float("inf")
            return (
                f"{self.value:.2f}, the label-likelihood floor: the best label {odds:.3g}x as likely as 'none of these'"
            )
        return f"{self.value:.2f}, calibrated from {self.examples} examples"


def threshold_in_force(manifest: Manifest, calibration: CalibrationFacts | None) -> Threshold:
    """The floor for ``manifest``'s entry model, given the router model's ``calibration``, if any."""
    entry = manifest.model(manifest.routing.entry)
    if entry.confidence_threshold is not None:
        return Threshold(value=entry.confidence_threshold, source="manifest")
    if calibration is None or (calibration.digest and calibration.digest != examples_digest(router_examples(manifest))):
        return Threshold(value=0.0, source="none")
    return Threshold(
        value=calibration.threshold, source="calibrated", rule=calibration.rule, examples=calibration.examples
    )
