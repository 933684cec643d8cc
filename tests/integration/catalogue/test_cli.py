from __future__ import annotations

from pathlib import Path

import msgspec
from click.testing import CliRunner

from nrt.adapters.catalogue import PreparedArtifact
from nrt.adapters.catalogue.record import ArtifactRecord
from nrt.entrypoints.cli.main import cli


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["models", *args])
    return result.exit_code, result.output


def test_list_shows_every_model(nrt_home: Path) -> None:
    code, output = _run("list")
    assert code == 0
    for name in ("gemma3-270m", "minilm-l6", "tiny-llama"):
        assert name in output
    assert "causal-lm" in output
    assert "encoder" in output


def test_list_shows_prepared_models_with_their_size(in_tiny_home: PreparedArtifact) -> None:
    code, output = _run("list")
    assert code == 0
    row = next(line for line in output.splitlines() if "tiny-llama" in line)
    assert "yes" in row
    assert "kB" in row


def test_prepare_twice_is_a_fast_no_op(in_tiny_home: PreparedArtifact) -> None:
    code, output = _run("prepare", "tiny-llama")
    assert code == 0, output
    assert "already prepared" in output
    assert "verified" in output


def test_prepare_builds_with_a_progress_report(nrt_home: Path) -> None:
    code, output = _run("prepare", "tiny-llama")
    assert code == 0, output
    assert "Export ONNX with past key values" in output
    assert "prepared tiny-llama" in output
    assert (nrt_home / "models" / "tiny-llama" / "nrt-artifact.json").is_file()


def test_unknown_names_exit_2(nrt_home: Path) -> None:
    for command in ("prepare", "info"):
        code, output = _run(command, "gpt-17")
        assert code == 2, output
        assert "'gpt-17' is not in the catalogue" in output
        assert "tiny-llama" in output


def test_hub_sources_exit_2_with_how_to_map_them(nrt_home: Path) -> None:
    code, output = _run("prepare", "hf://neurometric/router-1b-v2")
    assert code == 2
    assert "cannot be fetched" in output
    assert "catalogue://gemma3-270m" in output


def test_info_prints_the_record(in_tiny_home: PreparedArtifact) -> None:
    code, output = _run("info", "tiny-llama", "--json")
    assert code == 0
    assert msgspec.json.decode(output, type=ArtifactRecord) == in_tiny_home.record
    code, output = _run("info", "tiny-llama")
    assert code == 0
    assert "past_key_values.1.value" in output


def test_info_of_an_unprepared_model_says_how_to_prepare_it(nrt_home: Path) -> None:
    code, output = _run("info", "gemma3-270m")
    assert code == 1
    assert "nrt models prepare gemma3-270m" in output
