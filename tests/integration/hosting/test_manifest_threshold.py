"""``nrt manifest check`` shows the router's confidence floor: as set in the manifest, calibrated
here from the examples when the router model is on this machine, else calibrated at load."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from nrt.adapters.inference import Encoder
from nrt.core.manifest import parse_manifest
from nrt.core.routing import router_examples
from nrt.entrypoints.cli.main import cli
from nrt.hosting.embeddings.calibration import calibrate
from nrt.hosting.embeddings.index import build_index
from paths import FIXTURES


def check(path: Path, *options: str) -> str:
    result = CliRunner().invoke(cli, ["manifest", "check", *options, str(path)])
    assert result.exit_code == 0, result.output
    (line,) = [line for line in result.output.splitlines() if line.startswith("threshold")]
    return line


def test_a_local_encoder_router_is_calibrated_by_the_check(tiny_artifacts: Path, tmp_path: Path) -> None:
    bert = tiny_artifacts / "tiny-bert"
    text = (FIXTURES / "tiny-calibrated.yaml").read_text().replace("@TINY_BERT@", str(bert))
    path = tmp_path / "m.yaml"
    path.write_text(text)
    intents = router_examples(parse_manifest(text))
    encoder = Encoder.load(bert)  # what a worker computes when it loads these examples
    expected = calibrate(build_index({label: encoder.embed(list(t)) for label, t in intents}), digest="x")
    assert expected is not None
    assert check(path) == (
        f"threshold    {expected.threshold:.2f}, calibrated from 9 examples "
        f"(leave-one-out: own intent {expected.own:.2f}, other intents {expected.other:.2f})"
    )


def test_an_unprepared_router_is_calibrated_at_load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NRT_HOME", str(tmp_path / "empty-home"))
    line = check(FIXTURES / "minilm-calibrated.yaml")
    assert line == (
        "threshold    calibrated from 20 examples when the router loads them "
        "(not prepared here: nrt models prepare minilm-l6)"
    )


def test_a_threshold_in_the_manifest_is_shown_as_set(tiny_artifacts: Path, tmp_path: Path) -> None:
    text = (FIXTURES / "tiny-support.yaml").read_text().replace("@TINY_BERT@", str(tiny_artifacts / "x"))
    path = tmp_path / "m.yaml"
    path.write_text(text)
    # the router's directory is not there (--no-sources): the threshold shown is the manifest's
    assert check(path, "--no-sources") == "threshold    1.00, set in the manifest"  # 0.999
    single = text.replace("    confidence_threshold: 0.999\n", "").replace(
        str(tiny_artifacts / "x"), str(tiny_artifacts / "tiny-bert")
    )
    path.write_text(single)
    assert check(path) == (  # one example per intent: nothing to leave out
        "threshold    none: calibrating needs two intents and one with two examples, so every best label routes"
    )
