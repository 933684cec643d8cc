"""nats_server() / postgres_server(): env URL first, then Docker, then embedded."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import nats
import psycopg
import pytest
from sqlalchemy.engine import make_url

from nrt.adapters.infra import probe_jetstream, to_libpq, to_sqlalchemy
from nrt.entrypoints.cli.up import database_backing
from nrt.testing.containers import (
    DEFAULT_NATS_IMAGE,
    DEFAULT_POSTGRES_IMAGE,
    ContainerNats,
    ContainerPostgres,
    docker_available,
    unavailable_images,
)
from nrt.testing.servers import nats_server, postgres_server

if TYPE_CHECKING:
    from pathlib import Path

DOCKER = docker_available()


def test_docker_probe_answers_quickly(monkeypatch: pytest.MonkeyPatch) -> None:
    # an engine that is configured but unreachable must not stall the test run
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    began = time.monotonic()
    assert docker_available(timeout=0.5) is False
    assert time.monotonic() - began < 2


def test_env_var_wins_and_nothing_is_started(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("NRT_NATS_URL", "nats://nats.example:4222")
    monkeypatch.setenv("NRT_DATABASE_URL", "postgresql://nrt:secret@db.example:5432/nrt")
    with nats_server(tmp_path / "nats", env_var="NRT_NATS_URL") as url:
        assert url == "nats://nats.example:4222"
    with postgres_server(tmp_path / "pg", env_var="NRT_DATABASE_URL") as url:
        assert url == "postgresql+psycopg://nrt:secret@db.example:5432/nrt"
    assert not (tmp_path / "nats").exists()
    assert not (tmp_path / "pg").exists()


def test_nrt_up_uses_the_database_named_in_nrt_database_url(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, database_url: str
) -> None:
    # an operator points the stack at their database; "nrt" names the database of the embedded server only
    monkeypatch.setenv("NRT_DATABASE_URL", to_libpq(database_url))
    with database_backing(tmp_path) as database:
        url = database.url
        assert database.server is None
        assert url == to_sqlalchemy(database_url)
        with psycopg.connect(to_libpq(url)) as conn:
            assert conn.execute("SELECT current_database()").fetchone() == (make_url(database_url).database,)
    assert not (tmp_path / "postgres").exists()  # nothing was started


def test_nrt_up_gives_the_services_a_role_with_a_password_that_is_no_superuser(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("NRT_DATABASE_URL", raising=False)
    with database_backing(tmp_path) as database:
        url = make_url(database.url)
        assert (url.username, url.database) == ("nrt", "nrt")
        kept = (tmp_path / "secrets" / "postgres-nrt").read_text().strip()
        assert url.password == kept
        assert (tmp_path / "secrets" / "postgres-nrt").stat().st_mode & 0o777 == 0o600
        with psycopg.connect(to_libpq(database.url)) as conn:
            row = conn.execute("SELECT rolsuper, rolcreatedb, rolcreaterole FROM pg_roles WHERE rolname = current_user")
            assert row.fetchone() == (False, False, False)
            conn.execute("CREATE TABLE owned_here (id int)")  # it owns its database
        for user in ("postgres", "nrt"):  # no password, no entry: the superuser included
            with pytest.raises(psycopg.OperationalError, match="password"):
                psycopg.connect(f"postgresql://{user}@127.0.0.1:{url.port}/nrt", connect_timeout=5).close()
        superuser = (tmp_path / "secrets" / "postgres-superuser").read_text().strip()
        assert superuser != kept


async def test_embedded_fallback_without_env_or_docker(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("NRT_TEST_NATS_URL", raising=False)
    monkeypatch.delenv("NRT_TEST_DATABASE_URL", raising=False)
    with nats_server(tmp_path / "nats", use_docker=False) as nats_url:
        assert nats_url.startswith("nats://127.0.0.1:")
        client = await nats.connect(nats_url)
        await client.jetstream().add_stream(name="CHOICE", subjects=["choice.>"])
        await client.close()
    assert (tmp_path / "nats" / "jetstream").is_dir()

    with postgres_server(tmp_path / "pg", database="nrt_events", use_docker=False, durable=False) as db_url:
        assert db_url.startswith("postgresql+psycopg://postgres@127.0.0.1:")
        assert db_url.endswith("/nrt_events")
        with psycopg.connect(to_libpq(db_url)) as conn:
            assert conn.execute("SELECT current_database()").fetchone() == ("nrt_events",)
    assert (tmp_path / "pg" / "pgdata" / "PG_VERSION").is_file()


def skip_without(image: str) -> None:
    """Skip, saying why, where no Docker engine answers or the images cannot be had."""
    if not DOCKER:
        pytest.skip("no Docker engine answers")
    reason = unavailable_images(image)
    if reason is not None:
        pytest.skip(reason)


async def test_container_nats_has_jetstream() -> None:
    skip_without(DEFAULT_NATS_IMAGE)
    with ContainerNats() as server:
        host, port = server.url.removeprefix("nats://").rsplit(":", 1)
        assert probe_jetstream(host, int(port)) is None
        client = await nats.connect(server.url)
        js = client.jetstream()
        await js.add_stream(name="C", subjects=["c.>"])
        assert (await js.publish("c.1", b"x")).seq == 1
        await client.close()


def test_container_postgres_answers() -> None:
    skip_without(DEFAULT_POSTGRES_IMAGE)
    with ContainerPostgres() as server:
        assert server.url.startswith("postgresql+psycopg://")
        url = server.ensure_database("nrt_test")
        with psycopg.connect(to_libpq(url)) as conn:
            assert conn.execute("SELECT current_database()").fetchone() == ("nrt_test",)
