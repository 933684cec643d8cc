"""A clean environment for the settings tests: no variable of the configuration table is set."""

from __future__ import annotations

import pytest
from tools import settings_doc


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No variable of the table is set, whatever the shell running the tests has."""
    for variable in settings_doc.variables():
        monkeypatch.delenv(variable.name, raising=False)
