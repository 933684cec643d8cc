"""The keys file of a local `nrt up` stack: made once, kept 0600, reused, overridden by the variables."""

from __future__ import annotations

import shlex
from pathlib import Path

from nrt.core.api_keys import weak
from nrt.entrypoints.stack import keys_file
from paths import ROOT


def test_keys_are_made_once_kept_private_and_reused(tmp_path: Path) -> None:
    first, made = keys_file.ensure(tmp_path, {})
    assert made == ["infer", "admin"]
    assert first.api_key.startswith("nrt-")
    assert first.api_key != first.admin_key
    path = tmp_path / keys_file.KEYS_FILE
    assert path.stat().st_mode & 0o777 == 0o600
    again, made_again = keys_file.ensure(tmp_path, {})
    assert (again, made_again) == (first, [])
    assert keys_file.read(tmp_path) == first


def test_the_variables_win_and_are_written_for_the_client_commands(tmp_path: Path) -> None:
    keys_file.ensure(tmp_path, {})
    given = {"NRT_API_KEY": " infer-key-from-the-env ", "NRT_ADMIN_KEY": "admin-key-from-the-env"}
    keys, made = keys_file.ensure(tmp_path, given)
    assert (keys.api_key, keys.admin_key, made) == ("infer-key-from-the-env", "admin-key-from-the-env", [])
    assert keys_file.read(tmp_path) == keys
    assert keys.env() == {"NRT_API_KEY": "infer-key-from-the-env", "NRT_ADMIN_KEY": "admin-key-from-the-env"}


def test_a_short_key_is_taken_and_flagged_weak(tmp_path: Path) -> None:
    keys, made = keys_file.ensure(tmp_path, {"NRT_ADMIN_KEY": "short"})
    assert (keys.admin_key, made) == ("short", ["infer"])
    assert weak(keys.admin_key)
    assert not weak(keys.api_key)


def test_no_keys_file_reads_as_none(tmp_path: Path) -> None:
    assert keys_file.read(tmp_path) is None
    (tmp_path / keys_file.KEYS_FILE).write_text("not json")
    assert keys_file.read(tmp_path) is None


def test_the_readme_curl_example_sends_the_key_in_a_header() -> None:
    readme = (ROOT / "README.md").read_text()
    start = readme.index("curl -N http://127.0.0.1:8080/v1/chat/completions")
    command = readme[start : readme.index("```", start)].replace("\\\n", " ").replace("$NRT_API_KEY", "nrt-abc")
    argv = shlex.split(command)
    assert argv[argv.index("Authorization: Bearer nrt-abc") - 1] == "-H"
