"""Settings read by real processes: a service given a bad value exits 2 naming it; the CLI reaches
the gateway its variable names."""

from __future__ import annotations

import os
import subprocess
import sys

import httpx
import pytest
from click.testing import CliRunner

from nrt.entrypoints.cli.main import cli
from paths import ROOT
from settings_env import clean_environment

__all__ = ["clean_environment"]  # the autouse fixture


def test_a_service_with_a_bad_value_exits_2_naming_it() -> None:
    env = {**os.environ, "NRT_LOG_LEVEL": "loud", "PYTHONPATH": f"{ROOT / 'libs'}{os.pathsep}{ROOT / 'services'}"}
    for service in ("router_svc", "api_gateway"):
        done = subprocess.run(
            [sys.executable, "-m", service], env=env, capture_output=True, text=True, timeout=60, check=False
        )
        assert done.returncode == 2, done.stderr
        assert f"{service}: invalid configuration: NRT_LOG_LEVEL='LOUD'" in done.stderr


def test_the_cli_reads_the_gateway_from_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NRT_GATEWAY_URL", "http://127.0.0.1:9/")  # nothing listens on the discard port
    result = CliRunner().invoke(cli, ["status"])
    assert isinstance(result.exception, httpx.ConnectError)
    assert str(result.exception.request.url) == "http://127.0.0.1:9/v1/cluster"
