"""cluster_state started again with a manifest (``--manifest`` / NRT_MANIFEST): the same one records
nothing; another one is swapped in as the next version (drained, recorded), never ignored."""

from __future__ import annotations

from collections.abc import Callable

from nrt.adapters.store import EventStore
from nrt.core.events import DrainCompleted, ManifestApplied
from state_services import OnOneWorker, StartService
from worker_helpers import FAST, tiers, worker_manifest


async def manifests_applied(store: EventStore) -> list[tuple[int, str]]:
    return [
        (e.version, e.digest) for r in await store.read_stream("manifest") if isinstance(e := r.event, ManifestApplied)
    ]


async def test_a_restart_with_the_same_manifest_records_nothing_and_with_another_swaps_to_it(
    llama_copies: Callable[[str], str],
    event_store: EventStore,
    on_one_worker: OnOneWorker,
    start_cluster_state: StartService,
) -> None:
    v1 = worker_manifest(llama_copies)
    first = await on_one_worker(v1)
    v1_digest = first.controller.cluster.manifest_digest
    await first.stop()

    # the same manifest given again: nothing new in the log
    again = await start_cluster_state(manifest_text=v1, tuning=FAST)
    await again.controller.settle_tasks()
    assert await manifests_applied(event_store) == [(1, v1_digest)]
    await again.stop()

    # another manifest: applied as v2 by a drained swap, the models it adds loaded, those it drops unloaded
    v2 = worker_manifest(llama_copies, legal=False, contracts=True)
    changed = await start_cluster_state(manifest_text=v2, tuning=FAST)
    state = await changed.controller.wait_for(
        lambda s: s.manifest_version == 2 and "legal" not in tiers(s) and "contracts" in tiers(s), within=60
    )
    assert state.manifest_text == v2
    assert [version for version, _ in await manifests_applied(event_store)] == [1, 2]
    drains = [r.event for r in await event_store.read_stream("manifest") if isinstance(r.event, DrainCompleted)]
    assert [(d.from_version, d.to_version, d.outcome) for d in drains] == [(1, 2, "drained")]
