"""The event follower folds the JetStream event stream into the same state as a local fold."""

from __future__ import annotations

from faststream.nats import NatsBroker
from nats.aio.client import Client

from nrt.adapters.bus.follow import EventFollower
from nrt.adapters.bus.jetstream import EventPublisher
from nrt.core.events import CONTROL_PLANE, Event, ManifestApplied, TierChanged
from nrt.core.state import fold
from nrt.testing.traffic import traffic
from paths import FIXTURES

SPEC = FIXTURES / "spec-customer-support.yaml"


async def test_follower_catches_up_then_follows_live(nc: Client, broker: NatsBroker) -> None:
    publisher = EventPublisher(nc)
    early: list[Event] = list(traffic(40))
    for event in early:
        await publisher.publish(event)
    follower = EventFollower(broker)
    await follower.start()
    await follower.wait_for(lambda s: s.events_applied == 40, within=5)
    text = SPEC.read_text()
    applied = ManifestApplied(version=2, cluster="customer-support-agent", digest="x", text=text)
    late = TierChanged(
        model_id="legal",
        worker_id="w1",
        from_tier="standby",
        to_tier="resident",
        reason="command",
        elapsed_ms=2.0,
        bytes_held=5,
    )
    await publisher.publish(applied)
    await publisher.publish(late)
    state = await follower.wait_for(lambda s: s.events_applied == 42, within=5)
    assert state == fold([*early, applied, late])
    assert follower.sequence == 42
    assert follower.manifest is not None
    assert follower.manifest.cluster == "customer-support-agent"
    assert follower.manifest.dispatch_target("billing") == "billing"


async def test_a_manifest_that_does_not_parse_keeps_the_last_good_one(nc: Client, broker: NatsBroker) -> None:
    publisher = EventPublisher(nc)
    follower = EventFollower(broker)
    await follower.start()
    await publisher.publish(
        ManifestApplied(version=1, cluster="customer-support-agent", digest="a", text=SPEC.read_text())
    )
    await follower.wait_for(lambda s: s.manifest_version == 1, within=5)
    assert follower.manifest is not None
    await publisher.publish(ManifestApplied(version=2, cluster="broken", digest="b", text="cluster: broken\n"))
    await follower.wait_for(lambda s: s.manifest_version == 2, within=5)
    assert follower.manifest is not None
    assert follower.manifest.cluster == "customer-support-agent"


async def test_a_control_plane_follower_sees_only_control_plane_events(nc: Client, broker: NatsBroker) -> None:
    publisher = EventPublisher(nc)
    events: list[Event] = list(traffic(60))
    for event in events:
        await publisher.publish(event)
    control = [event for event in events if isinstance(event, CONTROL_PLANE)]
    assert 0 < len(control) < len(events)  # the traffic has both kinds
    seen: list[Event] = []
    follower = EventFollower(broker)
    follower.listen(lambda event, _: seen.append(event))
    await follower.start(types=CONTROL_PLANE)
    state = await follower.wait_for(lambda s: s.events_applied == len(control), within=5)
    assert [event.event_id for event in seen] == [event.event_id for event in control]
    assert state == fold(control)
    full = fold(events)
    assert (state.manifest_version, state.workers, state.draining) == (
        full.manifest_version,
        full.workers,
        full.draining,
    )
    assert {m: s.tiers for m, s in state.models.items()} == {m: s.tiers for m, s in full.models.items()}
