"""`nrt bus credentials DIR` and `nrt up`'s bus directory: a seed per identity, kept; the server config, re-written."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from nrt.adapters.bus.auth import CONFIG_FILE
from nrt.adapters.bus.contract import SERVICES
from nrt.adapters.bus.credentials import public_key, seed_file
from nrt.entrypoints.cli.main import cli
from nrt.entrypoints.stack.bus import SEED_ENV, stack_bus


def test_the_command_writes_a_private_seed_per_identity_and_keeps_them(tmp_path: Path) -> None:
    directory = tmp_path / "bus"
    first = CliRunner().invoke(cli, ["bus", "credentials", str(directory)])
    assert first.exit_code == 0, first.output
    seeds = {identity: seed_file(directory, identity).read_bytes() for identity in SERVICES}
    config = (directory / CONFIG_FILE).read_text()
    for identity, seed in seeds.items():
        assert stat.S_IMODE(seed_file(directory, identity).stat().st_mode) == 0o600
        assert public_key(seed) in config
        assert seed.decode().strip() not in config  # the config holds public keys only
    again = CliRunner().invoke(
        cli, ["bus", "credentials", str(directory), "--tls-cert", "/c.pem", "--tls-key", "/k.pem"]
    )
    assert again.exit_code == 0, again.output
    assert {identity: seed_file(directory, identity).read_bytes() for identity in SERVICES} == seeds
    assert '"cert_file": "/c.pem"' in (directory / CONFIG_FILE).read_text()


def test_a_half_tls_pair_is_refused(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["bus", "credentials", str(tmp_path), "--tls-cert", "/c.pem"])
    assert result.exit_code == 2
    assert "give both --tls-cert and --tls-key" in result.output


def test_nrt_up_gives_each_service_its_own_seed_unless_the_server_is_someone_elses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NRT_NATS_URL", raising=False)
    bus = stack_bus(tmp_path)
    assert bus is not None
    assert bus.config == tmp_path / "bus" / CONFIG_FILE
    assert bus.env("router_svc") == {SEED_ENV: str(tmp_path / "bus" / "router_svc.nk")}
    monkeypatch.setenv("NRT_NATS_URL", "nats://elsewhere:4222")
    assert stack_bus(tmp_path / "other") is None
    assert not (tmp_path / "other").exists()


def test_the_recorder_consumer_the_permissions_name_is_cluster_states() -> None:
    from cluster_state.recorder import CONSUMER
    from nrt.adapters.bus.auth import RECORDER_CONSUMER

    assert RECORDER_CONSUMER == CONSUMER
