"""NRT_NATS_URL as a cluster's server list, and the copies JetStream keeps by the cluster's size."""

from __future__ import annotations

from urllib.parse import urlparse

import pytest

from nrt.adapters.bus.replication import cluster_size, default_replicas
from nrt.adapters.bus.servers import NatsUrlError, parse_servers
from nrt.adapters.settings import Settings, SettingsError


def test_one_url_is_a_list_of_one() -> None:
    assert parse_servers("nats://127.0.0.1:4222") == ("nats://127.0.0.1:4222",)


def test_a_cluster_list_keeps_its_order_without_blanks() -> None:
    given = " nats://n1:4222, nats://n2:4222 ,tls://n3 "
    assert parse_servers(given) == ("nats://n1:4222", "nats://n2:4222", "tls://n3")


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("", "no NATS server given"),
        ("nats://n1:4222,,nats://n2:4222", "entry 2 of 3 is empty"),
        ("nats://n1:4222,", "entry 2 of 2 is empty"),
        ("n1:4222", "the URL (n1:4222) has no scheme: expected nats:// or tls://"),
        ("127.0.0.1", "has no scheme"),
        ("http://n1:4222", "has 'http://': expected nats:// or tls://"),
        ("nats://n1:http", "is not a valid URL"),
        ("nats://n1:70000", "is not a valid URL"),
        ("nats://:4222", "names no host"),
        ("nats://n1:0", "has port 0"),
        ("nats://n1:4222/x", "has something after its port"),
        ("nats://n1:4222,nats://N1", "entry 2 of 2 (nats://N1) repeats a server"),
    ],
)
def test_a_bad_list_names_the_entry_and_the_problem(value: str, problem: str) -> None:
    with pytest.raises(NatsUrlError) as caught:
        parse_servers(value)
    assert problem in str(caught.value)


def test_settings_take_a_server_list_and_refuse_a_bad_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NRT_NATS_URL", "nats://a:4222 , nats://b:4223,nats://c:4224")
    settings = Settings.from_env()
    assert settings.nats_url == "nats://a:4222,nats://b:4223,nats://c:4224"
    assert settings.nats_servers == ("nats://a:4222", "nats://b:4223", "nats://c:4224")
    monkeypatch.setenv("NRT_NATS_URL", "nats://a:4222,,nats://b:4222")
    with pytest.raises(SettingsError, match=r"NRT_NATS_URL='nats://a:4222,,nats://b:4222': .*entry 2 of 3 is empty"):
        Settings.from_env()


@pytest.mark.parametrize(("value", "replicas"), [(None, None), ("1", 1), ("3", 3), ("5", 5)])
def test_replicas_setting(monkeypatch: pytest.MonkeyPatch, value: str | None, replicas: int | None) -> None:
    if value is not None:
        monkeypatch.setenv("NRT_NATS_REPLICAS", value)
    assert Settings.from_env().nats_replicas == replicas


@pytest.mark.parametrize("value", ["0", "6", "three"])
def test_replicas_out_of_jetstreams_range_are_refused(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("NRT_NATS_REPLICAS", value)
    with pytest.raises(SettingsError, match=f"NRT_NATS_REPLICAS='{value}'"):
        Settings.from_env()


def test_cluster_size_counts_each_server_once() -> None:
    pool = [urlparse(u) for u in ("nats://127.0.0.1:4222", "nats://127.0.0.1:4223", "nats://127.0.0.1:4222")]
    assert cluster_size(pool) == 2
    assert cluster_size([urlparse("nats://n1"), urlparse("nats://n1:4222")]) == 1  # 4222 is the default port
    assert cluster_size([]) == 1


def test_cluster_size_is_what_the_server_advertises_when_that_is_more() -> None:
    one_name = [urlparse("nats://nats:4222")]  # a Service's name in front of the cluster's servers
    assert cluster_size(one_name, ["10.0.0.5:4222", "10.0.0.6:4222", "10.0.0.7:4222"]) == 3
    assert cluster_size(one_name, ["10.0.0.5:4222", "10.0.0.6:4222"]) == 2  # not 3: the name is one of them
    assert cluster_size(one_name) == 1  # a standalone server advertises nothing
    given = [urlparse(f"nats://n{i}:4222") for i in (1, 2, 3)]
    assert cluster_size(given, ["n1:4222"]) == 3  # right after the cluster formed, before the routes gossiped


@pytest.mark.parametrize(("size", "replicas"), [(1, 1), (2, 1), (3, 3), (5, 3), (200, 3)])
def test_three_copies_from_three_servers(size: int, replicas: int) -> None:
    assert default_replicas(size) == replicas
