"""`nrt up --nats-cluster N`: three servers at least, and never with NRT_NATS_URL (someone else's servers)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from nrt.entrypoints.cli.main import cli


@pytest.mark.parametrize("size", ["0", "2", "three"])
def test_a_cluster_has_three_servers_at_least(size: str) -> None:
    result = CliRunner().invoke(cli, ["up", "--nats-cluster", size])
    assert result.exit_code == 2
    assert "--nats-cluster" in result.output


def test_a_cluster_of_its_own_is_refused_beside_nrt_nats_url() -> None:
    result = CliRunner().invoke(
        cli, ["up", "--nats-cluster", "3"], env={"NRT_NATS_URL": "nats://n1:4222,nats://n2:4222"}
    )
    assert result.exit_code == 2
    assert "NRT_NATS_URL names servers (nats://n1:4222,nats://n2:4222)" in result.output
    assert "unset NRT_NATS_URL, or leave out --nats-cluster" in result.output
