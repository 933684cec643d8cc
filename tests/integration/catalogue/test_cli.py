from __future__ import annotations

import re
from pathlib import Path

import msgspec
from click.testing import CliRunner

from nrt.adapters.catalogue import PreparedArtifact
from nrt.adapters.catalogue.record import ArtifactRecord
from nrt.entrypoints.cli.main import cli
from nrt.testing.hf_checkpoints import put_in_cache, save_checkpoint


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


def test_prepare_sends_a_hub_source_to_models_add(nrt_home: Path) -> None:
    code, output = _run("prepare", "hf://neurometric/router-1b-v2")
    assert code == 2
    assert "prepare it with `nrt models add hf://neurometric/router-1b-v2`" in output


def test_models_add_fetches_from_the_cache_and_prepares_with_progress(
    nrt_home: Path, tmp_path: Path, hf_cache: Path
) -> None:
    commit = put_in_cache(hf_cache, "acme/helper", save_checkpoint(tmp_path / "ckpt", "qwen3"))
    code, output = _run("add", "hf://acme/helper", "--provider", "cpu")
    assert code == 0, output
    assert f"hf://acme/helper@{commit}: a qwen3 causal-lm, as user-hf-acme-helper-" in output
    assert "prepared user-hf-acme-helper-" in output
    assert "eta" in output  # the bar's estimate of the time left, from the steps done
    code, again = _run("add", "hf://acme/helper", "--provider", "cpu", "--id", "helper")
    assert code == 0, again
    assert "is already prepared and verified" in again
    assert "is 'helper' on this host" in again
    code, absent = _run("add", "hf://acme/absent")
    assert code == 2
    assert "hf://acme/absent: not in the Hugging Face cache" in absent
    code, export = _run("add", str(tmp_path))
    assert code == 2
    assert "is not an operator's checkpoint" in export
    code, listed = _run("list")
    assert code == 0
    [name] = re.findall(r"as (user-hf-acme-helper-[0-9a-f]{12})", output)
    assert "Operators' models" in listed
    assert "user-hf-acme" in listed
    assert "int8-dynamic" in listed
    assert re.search(rf"{name}\s*│\s*helper\s*│", listed)  # the id beside the content-addressed name
    code, taken = _run("add", str(tmp_path / "ckpt"), "--id", "helper")  # the same weights as a local directory
    assert code == 2
    assert "--id 'helper' already names" in taken
    code, bad = _run("add", "hf://acme/helper", "--id", "Not OK")
    assert code == 2
    assert "expected lower-case letters" in bad
    code, by_id = _run("info", "helper")
    assert code == 0, by_id
    assert f'"source": "hf://acme/helper@{commit}"' in by_id
    code, described = _run("info", name, "--speed")
    assert code == 0, described
    assert "decode here" in described
    assert re.search(r"\d+\.\d tokens/s", described)  # measured on this host, per built variant
    assert f'"source": "hf://acme/helper@{commit}"' in described  # the root variant's record
    code, removed = _run("rm", "helper")
    assert code == 0, removed
    assert not (nrt_home / "models" / name).exists()
    code, gone = _run("rm", name)
    assert code == 2
    assert "no operator's model" in gone
    code, builtin = _run("rm", "tiny-llama")
    assert code == 2
    assert "is not an operator's model" in builtin


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
