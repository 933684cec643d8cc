"""``nrt manifest check``: its table keeps long ids apart, and a source this machine cannot use is a
problem at its line (the worker's own resolution, ``nrt.adapters.catalogue.locate``), unless ``--no-sources``."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from huggingface_hub import constants

from nrt.adapters.bus.errors import RemoteError
from nrt.adapters.manifest_sources import pending_sources, unusable_sources
from nrt.core.manifest import parse_manifest
from nrt.core.manifest.summary import summarize
from nrt.entrypoints.cli.main import cli
from nrt.hosting.model_sources import LocalArtifact, resolve
from nrt.testing.stacks import tiny_manifest

LONG_IDS = textwrap.dedent(
    """\
    cluster: concierge
    models:
      router:
        source: catalogue://tiny-llama
        priority: critical
        footprint: 10MB
        intents:
          report_lost_card: ["I lost my card"]
          restaurant_reservation: ["book a table for two"]
      specialists:
        - id: report_lost_card
          source: catalogue://tiny-llama
          footprint: 10MB
        - id: restaurant_reservation
          source: SOURCE
          tier: standby
          footprint: 1.5GB
    routing:
      entry: router
      dispatch_rule: router.output.intent -> specialists.{intent}
    """
)


def check(path: Path, *options: str) -> Result:
    return CliRunner().invoke(cli, ["manifest", "check", *options, str(path)])


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "m.yaml"
    path.write_text(text)
    return path


def model_rows(summary: str) -> list[list[str]]:
    """The model table's rows, header first, each cut into its cells at the gaps between columns."""
    lines = summary.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("model "))
    end = lines.index("", start)
    return [re.split(r" {2,}", line.strip()) for line in lines[start:end]]


def test_the_model_table_keeps_ids_longer_than_the_column_apart() -> None:
    source = "catalogue://a-model-name-longer-than-the-rest"
    summary = summarize(parse_manifest(LONG_IDS.replace("SOURCE", source)), lambda _: None, [])
    assert model_rows(summary) == [
        ["model", "role", "tier", "priority", "footprint", "source"],
        ["router", "router", "resident", "critical", "10 MB", "catalogue://tiny-llama"],
        ["report_lost_card", "specialist", "resident", "normal", "10 MB", "catalogue://tiny-llama"],
        ["restaurant_reservation", "specialist", "standby", "normal", "1.5 GB", source],
    ]


def test_the_check_prints_the_table_with_long_ids_apart(tmp_path: Path) -> None:
    result = check(write(tmp_path, LONG_IDS.replace("SOURCE", "catalogue://tiny-llama")))
    assert result.exit_code == 0, result.output
    assert ["restaurant_reservation", "specialist", "standby", "normal", "1.5 GB", "catalogue://tiny-llama"] in (
        model_rows(result.output)
    )


UNUSABLE = textwrap.dedent(
    """\
    cluster: unusable
    models:
      router:
        source: catalogue://tiny-llama
      specialists:
        - id: billing
          source: hf://neurometric/billing-phi3
        - id: legal
          source: MISSING
        - id: travel
          source: catalogue://no-such-model
    routing:
      entry: router
      dispatch_rule: router.output.intent -> specialists.billing
    """
)


def test_sources_this_machine_cannot_use_are_problems_at_their_lines(
    tmp_path: Path, nrt_home: Path, hf_cache: Path
) -> None:
    missing = tmp_path / "no-such-export"
    path = write(tmp_path, UNUSABLE.replace("MISSING", str(missing)))
    result = check(path)
    assert result.exit_code == 2, result.output
    problems = [line for line in result.output.splitlines() if line.startswith(f"{path}:")]
    assert len(problems) == 3, result.output
    assert problems[0].startswith(
        f"{path}:7: models.specialists[0].source: source hf://neurometric/billing-phi3: not in the Hugging Face "
        f"cache ({hf_cache}) and HF_HUB_OFFLINE is set"
    )
    assert problems[1:] == [
        f"{path}:9: models.specialists[1].source: source '{missing}' is neither an ONNX export directory "
        f"(no model.onnx in {missing}) nor a Hugging Face checkpoint (config.json and *.safetensors)",
        f"{path}:11: models.specialists[2].source: source 'catalogue://no-such-model': 'no-such-model' is not in "
        "the catalogue; available: catalogue://gemma3-270m, catalogue://minilm-l6, catalogue://tiny-llama",
    ]
    assert f"3 problem(s) in {path}" in result.output
    assert "--no-sources checks a manifest meant for another" in result.output
    # for a manifest meant for another machine, the check stops at the manifest itself
    elsewhere = check(path, "--no-sources")
    assert elsewhere.exit_code == 0, elsewhere.output
    assert f"{path}: valid" in elsewhere.output


def test_an_hf_source_the_hub_can_still_give_is_listed_to_fetch_not_a_problem(
    tmp_path: Path, nrt_home: Path, hf_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)  # the Hub may be reachable: nothing is downloaded here
    path = write(tmp_path, UNUSABLE.replace("MISSING", str(tmp_path / "nope")))
    result = check(path)
    problems = [line for line in result.output.splitlines() if line.startswith(f"{path}:")]
    assert [line.split(": ")[1] for line in problems] == [
        "models.specialists[1].source",
        "models.specialists[2].source",
    ]
    manifest = parse_manifest(UNUSABLE.replace("MISSING", str(tmp_path / "nope")))
    assert pending_sources(manifest) == [
        "billing: source hf://neurometric/billing-phi3: not in the Hugging Face cache yet; a worker downloads it"
    ]


def test_unusable_sources_name_each_model_s_key_path_and_line(tmp_path: Path, nrt_home: Path, hf_cache: Path) -> None:
    manifest = parse_manifest(UNUSABLE.replace("MISSING", str(tmp_path / "nope")))
    assert [(p.path, p.line) for p in unusable_sources(manifest)] == [
        ("models.specialists[0].source", 7),
        ("models.specialists[1].source", 9),
        ("models.specialists[2].source", 11),
    ]


def test_prepared_catalogue_models_and_a_local_export_are_valid(
    tmp_path: Path, nrt_home: Path, tiny_artifacts: Path
) -> None:
    path = write(tmp_path, tiny_manifest("tiny"))
    assert check(path).exit_code == 0
    local = tiny_manifest("tiny").replace(
        '"catalogue://tiny-llama", tier: standby', f'"{tiny_artifacts / "tiny-llama"}", tier: standby'
    )
    assert str(tiny_artifacts) in local
    assert unusable_sources(parse_manifest(local)) == []
    result = check(write(tmp_path, local))
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("source", ["catalogue://gemma3-270m", "https://api.example.com/v1"])
def test_a_catalogue_model_not_prepared_yet_or_a_remote_endpoint_is_usable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str
) -> None:
    monkeypatch.setenv("NRT_HOME", str(tmp_path / "empty-home"))  # nothing prepared: `nrt up` prepares it
    text = UNUSABLE.replace("hf://neurometric/billing-phi3", source).replace("MISSING", "catalogue://tiny-llama")
    text = text.replace("catalogue://no-such-model", "catalogue://minilm-l6")
    if source.startswith("https"):
        text = text.replace(f"source: {source}", f"source: {source}\n      tier: remote")
    assert unusable_sources(parse_manifest(text)) == []


def test_the_worker_refuses_the_same_sources_with_its_load_errors(tmp_path: Path, nrt_home: Path) -> None:
    """The check and the worker share one resolution: what the check reports, a load refuses, with the
    worker's codes and statuses as before the resolution moved into the catalogue."""
    missing = tmp_path / "no-such-export"
    refusals = {}
    for source in ("hf://neurometric/billing-phi3", str(missing), "catalogue://no-such-model", "catalogue://minilm-l6"):
        with pytest.raises(RemoteError) as refused:
            resolve(source)
        refusals[source] = (refused.value.status, refused.value.code)
    assert refusals == {
        "hf://neurometric/billing-phi3": (400, "unresolvable_source"),
        str(missing): (400, "bad_request"),
        "catalogue://no-such-model": (400, "unresolvable_source"),
        "catalogue://minilm-l6": (503, "model_not_prepared"),  # not prepared in this NRT_HOME
    }
    served = resolve("catalogue://tiny-llama")
    assert isinstance(served, LocalArtifact)
    assert Path(served.path).is_absolute()
    assert Path(served.path, "model.onnx").is_file()
