"""A message of an older schema version (its Nrt-Event-Version header) is upcast by the stream's readers;
one of a newer version than the code knows is not read as the current one."""

from __future__ import annotations

from faststream.nats import NatsBroker
from nats.aio.client import Client

from nrt.adapters.bus import subjects
from nrt.adapters.bus.follow import EventFollower
from nrt.adapters.bus.jetstream import EventPublisher
from nrt.core.events import VERSION_HEADER, WorkerJoined
from nrt.core.vocabulary import WorkerRole

V1_ID = "0d5c2a8e-6f3b-4c1e-9a7d-000000000003"
V1_JOINED = (
    f'{{"cpu_count":2,"event_id":"{V1_ID}","host":"old","occurred_at":"2026-01-01T00:00:00Z",'
    '"ram_bytes":8,"type":"WorkerJoined","worker_id":"w-old"}'
).encode()


async def test_a_follower_folds_a_version_1_message_through_its_upcaster(nc: Client, broker: NatsBroker) -> None:
    js = nc.jetstream()
    subject = subjects.event("cluster_state", "WorkerJoined")
    future = V1_JOINED.replace(b"w-old", b"w-future").replace(V1_ID.encode(), V1_ID[:-1].encode() + b"4")
    await js.publish(subject, future, headers={VERSION_HEADER: "4"})  # written by a newer NRT: not read as v3
    await js.publish(subject, V1_JOINED, headers={"Nats-Msg-Id": V1_ID, VERSION_HEADER: "1"})
    current = WorkerJoined(worker_id="w-new", host="new", cpu_count=2, ram_bytes=8, role=WorkerRole.ROUTER)
    await EventPublisher(nc, service="cluster_state").publish(current)  # carries version 3
    follower = EventFollower(broker)
    await follower.start(types=[WorkerJoined])
    state = await follower.wait_for(lambda s: len(s.workers) == 2, within=5)
    assert (state.workers["w-old"].host, state.workers["w-old"].role) == ("old", WorkerRole.SPECIALIST)
    assert state.workers["w-new"].role == WorkerRole.ROUTER
    assert "w-future" not in state.workers  # its version is newer than this code reads: skipped, logged
