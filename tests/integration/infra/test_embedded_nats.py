"""Embedded nats-server: JetStream round trip, restart, isolation, clean stop."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import nats
import pytest

from infra_helpers import assert_all_gone, process_tree
from nrt.adapters.infra import DataDirInUseError, EmbeddedNats, ServerStartError, free_port, probe_jetstream

if TYPE_CHECKING:
    from pathlib import Path

SYSTEM_NATS_PORT = 4222  # a system NATS may run there: never ours


async def test_jetstream_publish_and_read_back(tmp_path: Path, record_timing: list[tuple[str, float]]) -> None:
    began = time.monotonic()
    with EmbeddedNats(tmp_path / "nats") as server:
        record_timing.append(("EmbeddedNats.start (fresh data dir)", time.monotonic() - began))
        assert server.url == f"nats://127.0.0.1:{server.port}"
        assert server.port != SYSTEM_NATS_PORT
        client = await nats.connect(server.url)
        try:
            js = client.jetstream()
            await js.add_stream(name="NRT_INFRA_TEST", subjects=["nrt.infra.test.>"])
            acks = [await js.publish(f"nrt.infra.test.{i}", f"event {i}".encode()) for i in range(3)]
            assert [ack.seq for ack in acks] == [1, 2, 3]
            stored = await js.get_msg("NRT_INFRA_TEST", 2)
            assert stored.data == b"event 1"
            consumer = await js.pull_subscribe("nrt.infra.test.>", durable="reader")
            msgs = await consumer.fetch(3, timeout=5)
            assert [m.data for m in msgs] == [b"event 0", b"event 1", b"event 2"]
            for m in msgs:
                await m.ack()
        finally:
            await client.close()
        pids = process_tree(server.pid or -1)
    assert_all_gone(pids)
    assert not server.running
    assert (tmp_path / "nats" / "jetstream").is_dir()


async def test_restart_on_same_data_dir_keeps_streams(tmp_path: Path, record_timing: list[tuple[str, float]]) -> None:
    server = EmbeddedNats(tmp_path / "nats")
    server.start()
    try:
        client = await nats.connect(server.url)
        js = client.jetstream()
        await js.add_stream(name="KEEP", subjects=["keep.>"])
        await js.publish("keep.one", b"survives a restart")
        await client.close()
    finally:
        server.stop()

    began = time.monotonic()
    server.start()
    record_timing.append(("EmbeddedNats.start (restart, existing store)", time.monotonic() - began))
    try:
        client = await nats.connect(server.url)
        js = client.jetstream()
        info = await js.stream_info("KEEP")
        assert info.state.messages == 1
        assert (await js.get_msg("KEEP", 1)).data == b"survives a restart"
        await client.close()
    finally:
        server.stop()


def test_temporary_data_dir_is_removed_on_stop() -> None:
    server = EmbeddedNats()
    server.start()
    data_dir = server.data_dir
    assert data_dir is not None
    assert data_dir.is_dir()
    assert probe_jetstream("127.0.0.1", server.port) is None
    server.stop()
    assert not data_dir.exists()
    server.stop()  # idempotent


def test_a_second_owner_of_a_running_data_dir_is_refused(tmp_path: Path) -> None:
    with EmbeddedNats(tmp_path / "nats") as first:
        with pytest.raises(DataDirInUseError, match=rf"pid {first.pid}"):
            EmbeddedNats(tmp_path / "nats").start()
        assert first.running
        assert first.pid_path.read_text().strip() == str(first.pid)


def test_requested_port_is_used(tmp_path: Path) -> None:
    port = free_port()
    with EmbeddedNats(tmp_path / "nats", port=port) as server:
        assert server.url == f"nats://127.0.0.1:{port}"


def test_a_port_in_use_is_a_clear_error_and_the_other_server_is_untouched(tmp_path: Path) -> None:
    with EmbeddedNats(tmp_path / "a") as first:
        with pytest.raises(ServerStartError, match=rf"pid {first.pid} \(.*nats-server.*\) already listens"):
            EmbeddedNats(tmp_path / "b", port=first.port).start()
        assert probe_jetstream("127.0.0.1", first.port) is None


def test_a_server_that_dies_at_start_up_reports_its_log(tmp_path: Path) -> None:
    # an unreadable store path makes nats-server exit during start-up
    (tmp_path / "nats").mkdir()
    (tmp_path / "nats" / "jetstream").write_text("not a directory")
    with pytest.raises(ServerStartError) as info:
        EmbeddedNats(tmp_path / "nats").start()
    assert "nats-server.log (tail)" in str(info.value)
    assert "exited with code" in str(info.value)
