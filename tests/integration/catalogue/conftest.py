"""Fixtures for the catalogue tests.

Every test runs against a temporary NRT_HOME except the Gemma ones, which use the real
cache (NRT_HOME or the user cache dir) so that gemma3-270m is converted once per machine.
tiny-llama (its root variant) is built once per session into its own temporary NRT_HOME.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from nrt.adapters.catalogue import ROOT_PROVIDER, PreparedArtifact, prepare


@pytest.fixture
def nrt_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "nrt-home"
    monkeypatch.setenv("NRT_HOME", str(home))
    return home


@pytest.fixture(scope="session")
def tiny_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("tiny-home")


@pytest.fixture(scope="session")
def tiny_llama(tiny_home: Path) -> PreparedArtifact:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("NRT_HOME", str(tiny_home))
        # The root variant alone, also where CUDA is: test_variants adds the cuda one itself.
        return prepare("tiny-llama", providers=(ROOT_PROVIDER,))


@pytest.fixture
def in_tiny_home(tiny_home: Path, tiny_llama: PreparedArtifact, monkeypatch: pytest.MonkeyPatch) -> PreparedArtifact:
    """NRT_HOME pointing at the session's home where tiny-llama is prepared."""
    monkeypatch.setenv("NRT_HOME", str(tiny_home))
    return tiny_llama
