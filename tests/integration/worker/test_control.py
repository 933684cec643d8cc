"""Tier control on real tiny models, without NATS: what each command does, records and answers."""

from __future__ import annotations

from pathlib import Path

import pytest

from nrt.adapters.bus.errors import BadRequest, RemoteError, Unavailable
from nrt.core.events import SessionKvEvicted, TierChanged
from nrt.core.protocol import PromoteModel, PromoteResult
from nrt.hosting.tiers import MAX_ERROR_CHARS, load_error
from nrt.testing.hf_checkpoints import put_in_cache, save_checkpoint
from shell_fakes import LLAMA, Jobs, Subscribed, Unsubscribed


def steps(jobs: Jobs) -> list[tuple[str, str, str, str, bool]]:
    return [(e.model_id, e.from_tier, e.to_tier, e.reason, e.cold_start) for e in jobs.shell.of(TierChanged)]


async def test_load_serves_the_subject_before_announcing_measured_tiers(jobs: Jobs) -> None:
    reply = await jobs.command("load", "billing", "placement", source=LLAMA, tier="resident")
    assert (reply.worker_id, reply.model_id, reply.tier, reply.changed) == ("w-jobs", "billing", "resident", True)
    assert reply.bytes_held > 0
    assert jobs.shell.calls[0] == Subscribed("billing")  # a request for it finds this worker once the log says so
    assert steps(jobs) == [
        ("billing", "unloaded", "standby", "placement", False),
        ("billing", "standby", "resident", "placement", False),
    ]
    standby, resident = jobs.shell.of(TierChanged)
    assert standby.elapsed_ms > 0
    assert 0 < standby.bytes_held <= resident.bytes_held == reply.bytes_held
    again = await jobs.command("load", "billing", "placement", source=LLAMA, tier="resident")
    assert (again.tier, again.changed) == ("resident", False)
    # a load of what it already holds re-announces the tier it holds (cluster_state had lost it)
    assert steps(jobs)[2:] == [("billing", "resident", "resident", "placement", False)]
    assert jobs.shell.of(TierChanged)[-1].bytes_held == reply.bytes_held


async def test_a_failed_load_withdraws_its_placement_and_serves_nothing(jobs: Jobs) -> None:
    with pytest.raises(BadRequest) as info:
        await jobs.command("load", "x", "placement", source="hf://org/model", tier="resident")
    assert info.value.code == "unresolvable_source"
    assert "hf://org/model: not in the Hugging Face cache" in info.value.message
    assert steps(jobs) == [("x", "unloaded", "unloaded", "load_failed", False)]
    [withdrawn] = jobs.shell.of(TierChanged)
    assert withdrawn.error == f"unresolvable_source: {info.value.message}"  # why, in the log
    assert jobs.shell.of(Subscribed) == []
    assert jobs.host.tier("x") == "unloaded"


async def test_commands_missing_their_fields_are_refused_by_name(jobs: Jobs) -> None:
    with pytest.raises(BadRequest, match="load needs a source and a tier"):
        await jobs.command("load", "m", source=LLAMA)
    await jobs.command("load", "m", source=LLAMA, tier="standby")
    with pytest.raises(BadRequest, match="evict_session needs a session_id"):
        await jobs.command("evict_session", "m")
    for action in ("promote", "demote", "unload", "evict_session"):
        with pytest.raises(Unavailable, match="model 'nobody' is not hosted on this worker"):
            await jobs.command(action, "nobody", session_id="s")


async def test_demote_then_unload_step_down_and_stop_serving(jobs: Jobs) -> None:
    await jobs.command("load", "m", source=LLAMA, tier="resident")
    demoted = await jobs.command("demote", "m", "budget_pressure")
    assert (demoted.tier, demoted.changed) == ("standby", True)
    unloaded = await jobs.command("unload", "m", "manifest_swap")
    assert (unloaded.tier, unloaded.bytes_held, unloaded.changed) == ("unloaded", 0, True)
    assert steps(jobs)[2:] == [
        ("m", "resident", "standby", "budget_pressure", False),
        ("m", "standby", "unloaded", "manifest_swap", False),
    ]
    assert jobs.shell.calls[-1] == Unsubscribed("m")  # after its last tier step


async def test_a_promote_command_is_a_cold_start_only_when_a_request_asked_for_it(jobs: Jobs) -> None:
    for model_id in ("a", "b"):
        await jobs.command("load", model_id, source=LLAMA, tier="standby")
    assert (await jobs.command("promote", "a", "co_activation")).tier == "resident"
    assert (await jobs.command("promote", "b", "on_demand")).tier == "resident"
    again = await jobs.command("promote", "b", "on_demand")
    assert again.changed is False
    assert [s for s in steps(jobs) if s[2] == "resident"] == [
        ("a", "standby", "resident", "co_activation", False),
        ("b", "standby", "resident", "on_demand", True),
    ]


async def test_a_cold_start_asks_cluster_state_which_promotes_within_the_budget(jobs: Jobs) -> None:
    await jobs.command("load", "legal", source=LLAMA, tier="standby")

    async def cluster_state(ask: PromoteModel) -> PromoteResult:  # makes room, then sends the promote command
        reply = await jobs.command("promote", ask.model_id, ask.reason)
        return PromoteResult(model_id=ask.model_id, worker_id=reply.worker_id, tier=reply.tier, elapsed_ms=1.0)

    jobs.shell.answer = cluster_state
    elapsed = await jobs.control.ensure_resident("legal", "on_demand", cold_start=True, manifest_version=3)
    assert elapsed is not None
    assert elapsed > 0
    assert jobs.shell.of(PromoteModel) == [
        PromoteModel(model_id="legal", reason="on_demand", worker_id="w-jobs", manifest_version=3)
    ]
    assert steps(jobs)[-1] == ("legal", "standby", "resident", "on_demand", True)
    assert len(jobs.shell.of(TierChanged)) == 2  # promoted once, by cluster_state's command
    assert await jobs.control.ensure_resident("legal", "on_demand", cold_start=True) is None  # ready: no ask
    assert len(jobs.shell.of(PromoteModel)) == 1


async def test_a_budget_refusal_fails_the_request_and_leaves_the_model_standby(jobs: Jobs) -> None:
    await jobs.command("load", "legal", source=LLAMA, tier="standby")

    async def refuse(ask: PromoteModel) -> PromoteResult:
        raise RemoteError("budget_exhausted", "no room for legal: every resident is critical", 503)

    jobs.shell.answer = refuse
    with pytest.raises(RemoteError) as info:
        await jobs.control.ensure_resident("legal", "on_demand", cold_start=True)
    assert (info.value.code, info.value.status) == ("budget_exhausted", 503)
    assert jobs.host.tier("legal") == "standby"
    assert len(jobs.shell.of(TierChanged)) == 1  # the load only


async def test_without_cluster_state_the_worker_promotes_the_model_itself(jobs: Jobs) -> None:
    await jobs.command("load", "legal", source=LLAMA, tier="standby")
    elapsed = await jobs.control.ensure_resident("legal", "on_demand", cold_start=True)  # nobody answers the ask
    assert elapsed is not None
    assert len(jobs.shell.of(PromoteModel)) == 1
    assert steps(jobs)[-1] == ("legal", "standby", "resident", "on_demand", True)
    await jobs.command("load", "warm", source=LLAMA, tier="standby")
    assert await jobs.control.ensure_resident("warm", "co_activation", cold_start=False) is not None
    assert len(jobs.shell.of(PromoteModel)) == 1  # only a cold start asks
    assert steps(jobs)[-1] == ("warm", "standby", "resident", "co_activation", False)


async def test_evicting_a_session_forgets_it_and_records_the_bytes_freed(jobs: Jobs) -> None:
    await jobs.command("load", "m", source=LLAMA, tier="standby")
    jobs.host.get("m").sessions.add("s1")
    reply = await jobs.command("evict_session", "m", "idle", session_id="s1")
    assert (reply.tier, reply.changed) == ("standby", True)  # changed: a session went, though no tier did
    assert set(jobs.host.get("m").sessions) == set()
    assert [
        (e.session_id, e.model_id, e.worker_id, e.bytes_freed, e.reason) for e in jobs.shell.of(SessionKvEvicted)
    ] == [
        ("s1", "m", "w-jobs", 0, "idle")  # a standby model holds no KV cache: nothing to free
    ]


def test_a_failed_loads_reason_names_the_error_and_is_bounded() -> None:
    assert load_error(BadRequest("no such model", code="unresolvable_source")) == "unresolvable_source: no such model"
    assert load_error(OSError("No space left on device")) == "OSError: No space left on device"
    long = load_error(RuntimeError("x" * 5000))
    assert len(long) == MAX_ERROR_CHARS
    assert long.startswith("RuntimeError: xxx")
    assert long.endswith("...")


async def test_a_load_records_exactly_which_weights_it_loaded(jobs: Jobs, tmp_path: Path, hf_cache: Path) -> None:
    commit = put_in_cache(hf_cache, "acme/billing", save_checkpoint(tmp_path / "ckpt", "llama"))
    await jobs.command("load", "billing", "placement", source="hf://acme/billing", tier="resident")
    standby, resident = jobs.shell.of(TierChanged)
    assert standby.weights is not None
    assert standby.weights.source == f"hf://acme/billing@{commit}"  # the commit, even for an unpinned source
    assert (standby.weights.provider, standby.weights.quantization) == ("cpu", "int8-dynamic")
    assert len(standby.weights.sha256) == 64
    assert standby.weights.bytes > 0
    assert resident.weights is None  # a promotion loads no new weights
    reloaded = await jobs.command("load", "llama", "placement", source=LLAMA, tier="standby")
    assert reloaded.changed
    tiny = jobs.shell.of(TierChanged)[-1].weights
    assert tiny is not None
    assert tiny.source.startswith("generated:random-llama")
