"""Settings: every variable is read by one typed field, with its default, and a bad value names its variable.

In processes (a service started with a bad value, the CLI reaching the gateway): test_settings_processes.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from pydantic import SecretStr
from tools import settings_doc

from api_gateway.settings import GatewaySettings
from cluster_state.settings import ClusterStateSettings
from nrt.adapters.bus.jetstream import StreamLimits
from nrt.adapters.inference import Spin
from nrt.adapters.settings import Settings, SettingsError, models_dir, nrt_home
from nrt.core.policies import Tuning
from nrt.entrypoints.cli.main import cli
from nrt.entrypoints.cli.settings import CliSettings
from nrt.hosting.remote.policy import RemotePolicy
from paths import ROOT
from router_svc.settings import RouterSettings
from settings_env import clean_environment
from specialist_worker.settings import WorkerSettings

__all__ = ["clean_environment"]  # the autouse fixture


def test_the_defaults_are_the_documented_ones() -> None:
    gateway = GatewaySettings.from_env()
    assert (gateway.nats_url, gateway.database_url, gateway.log_level, gateway.otlp_endpoint) == (
        "nats://127.0.0.1:4222",
        None,
        "INFO",
        None,
    )
    assert (gateway.host, gateway.port, gateway.auth) == ("127.0.0.1", 8080, True)
    assert (gateway.max_body_bytes, gateway.max_tokens_limit) == (1024 * 1024, 16384)
    assert (gateway.route_timeout, gateway.idle_timeout, gateway.request_timeout, gateway.apply_timeout) == (
        30.0,
        60.0,
        600.0,
        300.0,
    )
    router = RouterSettings.from_env()
    assert (router.classify_timeout, router.manifest_wait, router.queue) == (30.0, 5.0, "nrt-router")
    worker = WorkerSettings.from_env()
    assert (worker.worker_id, worker.worker_ram, worker.worker_max_batch, worker.worker_ort_spin) == (
        None,
        None,
        16,
        "never",
    )
    assert worker.heartbeat_s == 0.5
    assert worker.remote_policy() == RemotePolicy(connect_timeout_s=5.0, read_timeout_s=60.0, connect_attempts=3)
    state = ClusterStateSettings.from_env()
    assert (state.manifest, state.heartbeat_s, state.missed_heartbeats) == (None, 0.5, 3)
    assert state.tuning() == Tuning(heartbeat_s=0.5)
    assert CliSettings.from_env().gateway_url is None
    assert Settings.from_env().home.name == "nrt"  # the user cache dir's nrt folder


def test_every_variable_overrides_its_field(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    values = {
        "NRT_NATS_URL": ("nats://10.0.0.1:4222", "nats_url", "nats://10.0.0.1:4222"),
        "NRT_NATS_REPLICAS": ("3", "nats_replicas", 3),
        "NRT_DATABASE_URL": ("postgresql://u@db:5432/x", "database_url", "postgresql://u@db:5432/x"),
        "NRT_NATS_NKEY_SEED_FILE": (
            "/run/nrt/bus.nk",
            "nats_nkey_seed_file",
            Path("/run/nrt/bus.nk"),
        ),
        "NRT_NATS_TLS_CA": ("/etc/nrt/ca.pem", "nats_tls_ca", Path("/etc/nrt/ca.pem")),
        "NRT_HOME": (str(tmp_path), "home", tmp_path),
        "NRT_LOG_LEVEL": ("debug", "log_level", "DEBUG"),
        "OTEL_EXPORTER_OTLP_ENDPOINT": ("http://jaeger:4318", "otlp_endpoint", "http://jaeger:4318"),
        "NRT_AUTH": ("off", "auth", False),
        "NRT_API_KEY": ("an-infer-key-0123456789", "api_key", SecretStr("an-infer-key-0123456789")),
        "NRT_ADMIN_KEY": ("an-admin-key-0123456789", "admin_key", SecretStr("an-admin-key-0123456789")),
        "NRT_GATEWAY_HOST": ("0.0.0.0", "host", "0.0.0.0"),
        "NRT_GATEWAY_PORT": ("9000", "port", 9000),
        "NRT_GATEWAY_MAX_BODY_BYTES": ("2048", "max_body_bytes", 2048),
        "NRT_GATEWAY_MAX_TOKENS": ("64", "max_tokens_limit", 64),
        "NRT_GATEWAY_ROUTE_TIMEOUT": ("2.5", "route_timeout", 2.5),
        "NRT_GATEWAY_IDLE_TIMEOUT": ("3", "idle_timeout", 3.0),
        "NRT_GATEWAY_FIRST_TOKEN_TIMEOUT": ("7", "first_token_timeout", 7.0),
        "NRT_GATEWAY_TOKEN_TIMEOUT_FACTOR": ("20", "token_timeout_factor", 20.0),
        "NRT_GATEWAY_TOKEN_TIMEOUT_FLOOR": ("2", "token_timeout_floor", 2.0),
        "NRT_GATEWAY_REQUEST_TIMEOUT": ("40", "request_timeout", 40.0),
        "NRT_GATEWAY_APPLY_TIMEOUT": ("50", "apply_timeout", 50.0),
        "NRT_GATEWAY_RATE_LEASE_SHARE": ("0.25", "rate_lease_share", 0.25),
        "NRT_GATEWAY_RATE_LEASE_S": ("0.5", "rate_lease_s", 0.5),
        "NRT_ROUTER_CLASSIFY_TIMEOUT": ("7", "classify_timeout", 7.0),
        "NRT_ROUTER_MANIFEST_WAIT": ("0.5", "manifest_wait", 0.5),
        "NRT_ROUTER_WORKER_ID": ("r-7", "router_worker_id", "r-7"),
        "NRT_ROUTER_RAM": ("2GB", "router_ram", 2 * 10**9),
        "NRT_ROUTER_MAX_BATCH": ("6", "router_max_batch", 6),
        "NRT_ROUTER_ORT_THREADS": ("1", "router_ort_threads", 1),
        "NRT_WORKER_ORT_THREADS": ("2", "worker_ort_threads", 2),
        "NRT_FUSED_GRAPHS": ("1", "fused_graphs", True),
        "NRT_UVLOOP": ("0", "uvloop", False),
        "NRT_METRICS_PORT": ("9464", "metrics_port", 9464),
        "NRT_METRICS_HOST": ("127.0.0.1", "metrics_host", "127.0.0.1"),
        "NRT_HEARTBEAT_S": ("0.25", "heartbeat_s", 0.25),
        "NRT_WORKER_ID": ("w-7", "worker_id", "w-7"),
        "NRT_WORKER_RAM": ("8GB", "worker_ram", 8 * 10**9),
        "NRT_WORKER_MAX_BATCH": ("4", "worker_max_batch", 4),
        "NRT_WORKER_PREFIX_CACHE": ("16MB", "worker_prefix_cache", 16 * 10**6),
        "NRT_WORKER_MAX_QUEUE": ("8", "worker_max_queue", 8),
        "NRT_WORKER_ORT_SPIN": ("always", "worker_ort_spin", "always"),
        "NRT_WORKER_SHARE_ARTIFACTS": ("0", "worker_share_artifacts", False),
        "NRT_WORKER_REMOTE_CONNECT_TIMEOUT": ("1.5", "worker_remote_connect_timeout", 1.5),
        "NRT_WORKER_REMOTE_READ_TIMEOUT": ("30", "worker_remote_read_timeout", 30.0),
        "NRT_WORKER_REMOTE_CONNECT_ATTEMPTS": ("2", "worker_remote_connect_attempts", 2),
        "NRT_WORKER_HF_INFERENCE_URL": (
            "http://tgi.internal:8080/v1",
            "worker_hf_inference_url",
            "http://tgi.internal:8080/v1",
        ),
        "NRT_MANIFEST": ("/etc/nrt.yaml", "manifest", Path("/etc/nrt.yaml")),
        "NRT_MISSED_HEARTBEATS": ("5", "missed_heartbeats", 5),
        "NRT_GATEWAY_URL": ("http://gw:8080", "gateway_url", "http://gw:8080"),
        "NRT_GATEWAY_INSTANCE": ("abc123", "instance", "abc123"),
        "NRT_GATEWAY_MAX_MESSAGES": ("100", "max_messages", 100),
        "NRT_SNAPSHOT_EVERY_EVENTS": ("500", "snapshot_every_events", 500),
        "NRT_SNAPSHOT_EVERY_S": ("30", "snapshot_every_s", 30.0),
        "NRT_LEADER_LEASE_S": ("6", "leader_lease_s", 6.0),
        "NRT_LEADER_RENEW_S": ("2", "leader_renew_s", 2.0),
        "NRT_EVENTS_STREAM_MAX_MSGS": ("250000", "events_stream_max_msgs", 250_000),
        "NRT_EVENTS_STREAM_MAX_AGE_S": ("3600", "events_stream_max_age_s", 3600.0),
    }
    assert set(values) == {v.name for v in settings_doc.variables()}, "a variable without a test value"
    for name, (raw, _, _) in values.items():
        monkeypatch.setenv(name, raw)
    for _, cls in settings_doc.readers():
        read = cls.from_env()
        for name, (_, field, expected) in values.items():
            if field in cls.model_fields:
                assert getattr(read, field) == expected, f"{cls.__name__}.{field} from {name}"
    assert ClusterStateSettings.from_env().tuning() == Tuning(heartbeat_s=0.25, missed_beats=5)
    assert StreamLimits.of(ClusterStateSettings.from_env()) == StreamLimits(max_msgs=250_000, max_age_s=3600.0)


def test_nrt_home_follows_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("NRT_HOME", str(tmp_path / "one"))
    assert models_dir() == tmp_path / "one" / "models"
    monkeypatch.setenv("NRT_HOME", str(tmp_path / "two"))
    assert nrt_home() == tmp_path / "two"


def test_an_empty_variable_counts_as_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NRT_GATEWAY_PORT", "")
    monkeypatch.setenv("NRT_ADMIN_KEY", "")
    monkeypatch.setenv("NRT_WORKER_RAM", "")
    assert GatewaySettings.from_env().port == 8080
    assert ClusterStateSettings.from_env().admin_key is None
    assert WorkerSettings.from_env().worker_ram is None


def test_a_renamed_field_is_read_only_from_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NRT_PORT", "1")  # the field is `port`, its variable NRT_GATEWAY_PORT
    monkeypatch.setenv("NRT_ROUTE_TIMEOUT", "1")
    gateway = GatewaySettings.from_env()
    assert (gateway.port, gateway.route_timeout) == (8080, 30.0)


def test_code_sets_fields_by_name_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NRT_GATEWAY_ROUTE_TIMEOUT", "9")
    monkeypatch.setenv("NRT_GATEWAY_IDLE_TIMEOUT", "8")
    gateway = GatewaySettings(route_timeout=2, nats_url="nats://elsewhere:4222")
    assert (gateway.route_timeout, gateway.idle_timeout, gateway.nats_url) == (2.0, 8.0, "nats://elsewhere:4222")


@pytest.mark.parametrize(
    ("variable", "value", "cls", "says"),
    [
        ("NRT_GATEWAY_PORT", "http", GatewaySettings, "NRT_GATEWAY_PORT='http': Input should be a valid integer"),
        ("NRT_GATEWAY_PORT", "70000", GatewaySettings, "NRT_GATEWAY_PORT='70000': Input should be less than"),
        ("NRT_GATEWAY_ROUTE_TIMEOUT", "-1", GatewaySettings, "NRT_GATEWAY_ROUTE_TIMEOUT='-1': Input should be greater"),
        ("NRT_LOG_LEVEL", "loud", RouterSettings, "NRT_LOG_LEVEL='LOUD': Input should be 'CRITICAL', 'ERROR'"),
        ("NRT_WORKER_RAM", "lots", WorkerSettings, "NRT_WORKER_RAM='lots': Value error, expected a size"),
        ("NRT_WORKER_MAX_BATCH", "0", WorkerSettings, "NRT_WORKER_MAX_BATCH='0': Input should be greater than"),
        (
            "NRT_WORKER_ORT_SPIN",
            "maybe",
            WorkerSettings,
            "NRT_WORKER_ORT_SPIN='maybe': Input should be 'never', 'run' or 'always'",
        ),
        ("NRT_HEARTBEAT_S", "0", ClusterStateSettings, "NRT_HEARTBEAT_S='0': Input should be greater than 0"),
        ("NRT_MISSED_HEARTBEATS", "few", ClusterStateSettings, "NRT_MISSED_HEARTBEATS='few': Input should be"),
    ],
)
def test_a_bad_value_names_its_variable(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, cls: type[Settings], says: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(SettingsError) as caught:
        cls.from_env()
    assert str(caught.value).startswith("invalid configuration: ")
    assert says in str(caught.value)


def test_every_bad_value_is_named_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NRT_GATEWAY_PORT", "http")
    monkeypatch.setenv("NRT_GATEWAY_MAX_TOKENS", "many")
    with pytest.raises(SettingsError, match=r"NRT_GATEWAY_PORT='http': .*; NRT_GATEWAY_MAX_TOKENS='many': "):
        GatewaySettings.from_env()


def test_the_cli_reports_a_bad_value_as_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NRT_LOG_LEVEL", "loud")
    result = CliRunner().invoke(cli, ["status"])
    assert result.exit_code == 2
    assert "invalid configuration: NRT_LOG_LEVEL='LOUD'" in result.output


def test_the_readme_table_is_the_generated_one() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert settings_doc.table_in(readme) == settings_doc.generated_block(), (
        "the README's configuration table is stale: run `python -m tools.settings_doc --write README.md`"
    )


def test_every_variable_has_a_row_and_a_meaning() -> None:
    table = settings_doc.render_table()
    for _, cls in settings_doc.readers():
        for field, info in cls.model_fields.items():
            assert info.description, f"{cls.__name__}.{field}"
            assert f"| `{settings_doc.env_name(cls, field)}` |" in table


@pytest.mark.parametrize(("raw", "spin"), [("1", "always"), ("0", "never"), ("run", "run")])
def test_worker_ort_spin_keeps_its_old_yes_and_no(monkeypatch: pytest.MonkeyPatch, raw: str, spin: Spin) -> None:
    """NRT_WORKER_ORT_SPIN was a yes/no before it named a policy: `1` spun between runs, `0` never."""
    monkeypatch.setenv("NRT_WORKER_ORT_SPIN", raw)
    assert WorkerSettings.from_env().worker_ort_spin == spin
