"""The bus admits only NRT's identities, and each may publish and subscribe only what the contract says."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from nrt.adapters.bus import auth
from nrt.adapters.bus.connection import reconnecting
from nrt.adapters.bus.contract import CHANNELS, SERVICES, Channel, Service
from nrt.adapters.bus.credentials import BusCredentials

Connect = Callable[[Service], Awaitable[tuple[Client, list[Exception]]]]


@pytest.fixture
async def as_identity(secure_nats_url: str, bus_keys: Path) -> AsyncIterator[Connect]:
    """Connect as one of NRT's identities; the errors the server sends it (permission violations) are collected."""
    clients: list[Client] = []

    async def open_as(identity: Service) -> tuple[Client, list[Exception]]:
        errors: list[Exception] = []

        async def collect(exc: Exception) -> None:
            errors.append(exc)

        options = reconnecting(secure_nats_url, f"test {identity}", credentials=BusCredentials.of(bus_keys, identity))
        client = await nats.connect(secure_nats_url, **(options | {"error_cb": collect}))
        clients.append(client)
        return client, errors

    yield open_as
    for client in clients:
        await client.close()


def _refused(errors: list[Exception], what: str, subject: str) -> bool:
    """Whether the server refused ``what`` ("publish to" / "subscription to") ``subject`` (nats-py's error callback)."""
    return any(f'permissions violation for {what} "{subject}"'.lower() in str(e).lower() for e in errors)


async def _settled(client: Client) -> None:
    """Until the server has answered what ``client`` sent (its refusals arrive through the error callback)."""
    await client.flush()
    await asyncio.sleep(0.3)


def _sample(channel: Channel, identity: str) -> str:
    """The subject ``identity`` would subscribe to on ``channel`` (its own name for a ``{service}`` token)."""
    return channel.address.replace("{service}", identity).replace("{model_id}", "x").replace("{worker_id}", "x")


def _concrete(channel: Channel, identity: str) -> str:
    """A subject of the channel as ``identity`` would send it (its own name for a ``{service}`` token)."""
    own = channel.transport == "jetstream"  # events: under the publisher's own prefix
    return ".".join(
        (identity if own and t == "{service}" else "x") if t.startswith("{") else t for t in channel.address.split(".")
    )


async def test_an_anonymous_connection_is_refused(secure_nats_url: str) -> None:
    with pytest.raises(nats.errors.Error, match=r"(?i)authorization"):
        await nats.connect(secure_nats_url, allow_reconnect=False, max_reconnect_attempts=0, connect_timeout=2)


async def test_an_unknown_key_is_refused(secure_nats_url: str, tmp_path: Path) -> None:
    stranger = tmp_path / "stranger.nk"
    stranger.write_bytes(auth.new_seed())
    with pytest.raises(nats.errors.Error, match=r"(?i)authorization"):
        await nats.connect(
            secure_nats_url,
            nkeys_seed=str(stranger),
            allow_reconnect=False,
            max_reconnect_attempts=0,
            connect_timeout=2,
        )


@pytest.mark.parametrize("identity", SERVICES)
async def test_each_identity_publishes_exactly_what_the_contract_lets_it(
    identity: Service, as_identity: Connect
) -> None:
    client, errors = await as_identity(identity)
    for channel in CHANNELS:
        await client.publish(_concrete(channel, identity), b"{}")
    await _settled(client)
    for channel in CHANNELS:
        subject = _concrete(channel, identity)
        refused = _refused(errors, "publish to", subject)
        if identity in channel.publishers:
            assert not refused, f"{identity} may publish {subject} (the contract says so): {errors}"
        else:
            assert refused, f"{identity} published {subject}, which the contract does not let it"


@pytest.mark.parametrize("identity", SERVICES)
async def test_each_identity_subscribes_only_where_the_contract_says(identity: Service, as_identity: Connect) -> None:
    client, errors = await as_identity(identity)
    channels = [c for c in CHANNELS if c.transport != "jetstream"]  # events come through a consumer, to its inbox
    for channel in channels:
        await client.subscribe(_sample(channel, identity))
    await client.subscribe("_INBOX.>")  # nobody reads another's replies
    await _settled(client)
    assert _refused(errors, "subscription to", "_INBOX.>")
    for channel in channels:
        subject = _sample(channel, identity)
        refused = _refused(errors, "subscription to", subject)
        if identity in channel.subscribers:
            assert not refused, f"{identity} may subscribe to {subject}: {errors}"
        else:
            assert refused, f"{identity} subscribed to {subject}, which the contract does not let it"


async def test_a_worker_cannot_send_control_routes_or_another_services_events(as_identity: Connect) -> None:
    router, _ = await as_identity("router_svc")
    seen: list[str] = []

    async def note(msg: Msg) -> None:
        seen.append(msg.subject)

    await router.subscribe("nrt.control.*", cb=note)
    await router.subscribe("nrt.route", cb=note)
    await router.flush()
    worker, errors = await as_identity("specialist_worker")
    forbidden = ["nrt.control.r1", "nrt.route", "nrt.events.cluster_state.ManifestApplied"]
    for subject in forbidden:
        await worker.publish(subject, b"{}")
    await _settled(worker)
    await router.flush()
    assert [s for s in forbidden if _refused(errors, "publish to", s)] == forbidden
    assert seen == []  # nothing it sent reached anyone


async def test_a_worker_streams_many_frames_to_the_inbox_it_was_given(as_identity: Connect) -> None:
    """The token stream: the gateway's inbox is the reply subject router_svc forwards; the worker answers
    it with a frame per token (allow_responses, not a publish permission on anyone's inbox)."""
    gateway, _ = await as_identity("api_gateway")
    router, _ = await as_identity("router_svc")
    worker, worker_errors = await as_identity("specialist_worker")
    frames = 500

    async def serve(msg: Msg) -> None:
        for n in range(frames):
            await worker.publish(msg.reply, str(n).encode())

    await worker.subscribe("nrt.infer.billing", cb=serve)
    await worker.flush()
    inbox = gateway.new_inbox()
    received: asyncio.Queue[bytes] = asyncio.Queue()

    async def take(msg: Msg) -> None:
        received.put_nowait(msg.data)

    await gateway.subscribe(inbox, cb=take)
    await gateway.flush()
    await router.publish("nrt.infer.billing", b"{}", reply=inbox)
    got = [await asyncio.wait_for(received.get(), 5) for _ in range(frames)]
    assert got == [str(n).encode() for n in range(frames)]
    unasked = gateway.new_inbox()  # an inbox of the gateway's that no request gave it
    await worker.publish(unasked, b"forged")
    await _settled(worker)
    assert _refused(worker_errors, "publish to", unasked)
