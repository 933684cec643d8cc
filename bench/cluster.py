"""Cluster benchmark: how cluster_state's cost grows with the number of workers (issue 28, item 6).

For each ``--workers`` size, on a fresh embedded NATS server (JetStream) and a fresh migrated database
on one PostgreSQL server (``--database-url``, else NRT_DATABASE_URL's, else an embedded one):

1. cluster_state runs as its own process (``python -m cluster_state``, as ``nrt up`` starts it) and applies
   the bench manifest (a router and six specialists, three resident and three standby, 1 GB each).
   Its CPU is read from the kernel: the scheduler's run time of its threads (``/proc/<pid>/task/*/schedstat``, ns).
2. Idle: its CPU over ``--duration`` seconds with no worker (the recorder's polls, the ticks, the sweeps):
   the floor that every size pays, subtracted from the steady figure below.
3. The fleet: ``N`` simulated specialist workers (``bench.sim_worker``), each with a real nats-py connection
   of its own (``N`` connections), publish NRT's real ``WorkerJoined`` on the events stream, heartbeat on
   ``nrt.workers.heartbeat`` at the production interval (NRT_HEARTBEAT_S's default, 0.5 s) with their memory
   and the models they hold, and answer cluster_state's control commands as a worker does (the load's
   ``TierChanged`` steps, then the ``ControlReply``), with no model. The run waits until the log shows every
   worker alive and every specialist placed at its tier.
4. Steady: cluster_state's CPU over ``--duration`` seconds of the fleet's heartbeats. CPU per heartbeat is
   that CPU less the idle floor's over the same time, divided by the heartbeats sent; the per-worker cost is
   the same CPU per second per worker (milliseconds of CPU each second, per worker).
5. The fold: the ``ClusterState`` cluster_state serves on ``nrt.state.get`` (what ``nrt replay`` folds),
   its JSON bytes and its snapshot encoding's (``nrt.core.state.snapshot.encode_state``, what a snapshot
   stores), in total and per worker.
6. Join to placement: ``--probes`` times, a new router host (a router_svc instance, whose join places
   the entry model on it) joins the running fleet; the time from its ``WorkerJoined`` going out to the
   ``load`` command arriving on its control subject (the recorder's fetch, the append, the fold, the
   placement policy, the decision's commit, the command), and, from the log, the time from the
   ``WorkerJoined`` to the ``ModelPlaced`` decision (their ``occurred_at``: cluster_state's part alone, without
   the command's trip and the bench's own event loop). Then it leaves (``WorkerLost``).

7. In process, the pure part of that cost (``bench.cluster_policies``): a tick's policies (liveness, stalls,
   orphans, placement; four ticks a second) per worker, and a heartbeat's bookkeeping, on a state folded
   from the same manifest and as many workers.

Every figure is printed against the smallest size's; then what each worker added between the smallest and
the largest fleet (the steady CPU's growth over the workers added: superlinear growth shows there first),
and last the per-worker cost of the largest size against the smallest's (target: flat within 1.5x). ``--profile DIR`` runs cluster_state under
cProfile and leaves ``cluster_state-<N>.prof`` there, for finding what grows.

    python -m bench.cluster [--workers 10 50 200] [--duration 20] [--probes 5] [--database-url URL]
                            [--profile DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import msgspec
import nats
import psutil  # type: ignore[import-untyped,unused-ignore]
import psycopg
from nats.aio.client import Client

from bench import cluster_policies
from bench.cluster_policies import PolicyCost
from bench.common import fresh_database, postgres, report
from bench.sim_worker import HEARTBEAT_S, SimWorker
from nrt.adapters.bus import subjects
from nrt.adapters.infra._process import dies_with_parent
from nrt.adapters.infra.pgurl import to_libpq
from nrt.core.events import ModelPlaced, WorkerJoined, decode
from nrt.core.state import ClusterState
from nrt.core.state.snapshot import encode_state
from nrt.core.vocabulary import Tier, WorkerRole
from nrt.testing.servers import nats_server

ENTRY = "router"
SPECIALISTS = {f"s{i}": Tier.RESIDENT if i < 3 else Tier.STANDBY for i in range(6)}
MODEL_BYTES = 10**9  # every model's footprint in the manifest, held by a simulated worker per model
WORKER_RAM = 64 * 10**9  # what each simulated worker offers for models
MANIFEST = (
    "cluster: bench-cluster\n"
    "resources:\n  gpu_budget: 64GB\n  ram_budget: 64GB\n"
    "models:\n  router:\n    source: /bench/models/router\n    tier: resident\n    priority: critical\n"
    "    footprint: 1GB\n  specialists:\n"
    + "".join(
        f"    - id: {model_id}\n      source: /bench/models/{model_id}\n      tier: {tier.value}\n      footprint: 1GB\n"
        for model_id, tier in SPECIALISTS.items()
    )
    + "routing:\n  entry: router\n  dispatch_rule: router.output.intent -> specialists.{intent}\n"
)
READY_WITHIN = 90.0  # cluster_state's start, and the fleet's joins and placements
JOIN_WITHIN = 30.0  # a probe's join to its placement
CONNECT_BATCH = 25  # simulated workers connected and joined at a time
TARGET = 1.5


@dataclass(frozen=True)
class SizeRun:
    """What one fleet size measured."""

    workers: int
    idle_cpu_s: float  # cluster_state's CPU over idle_s with no worker
    idle_s: float
    steady_cpu_s: float  # over steady_s with the fleet heartbeating
    steady_s: float
    beats: int  # heartbeats the fleet sent during steady_s
    fleet_s: float  # from the first join to every worker alive and every specialist placed, in the log
    join_ms: tuple[float, ...]  # each probe's WorkerJoined to its load command
    decided_ms: tuple[float, ...]  # each probe's WorkerJoined to its ModelPlaced, as the log stamps them
    state_bytes: int  # the ClusterState's JSON (nrt.state.get)
    snapshot_bytes: int  # its snapshot encoding
    rss_mib: float  # cluster_state's resident memory after the steady window

    @property
    def marginal_cpu_s(self) -> float:
        """The steady CPU less what the idle floor costs over the same time."""
        return self.steady_cpu_s - self.idle_cpu_s / self.idle_s * self.steady_s

    @property
    def cpu_per_beat_us(self) -> float:
        return self.marginal_cpu_s / self.beats * 1e6

    @property
    def raw_cpu_per_beat_us(self) -> float:
        return self.steady_cpu_s / self.beats * 1e6

    @property
    def per_worker_ms_per_s(self) -> float:
        """cluster_state's CPU milliseconds each second per worker, above the idle floor."""
        return self.marginal_cpu_s / self.steady_s / self.workers * 1e3

    @property
    def join_median_ms(self) -> float:
        return statistics.median(self.join_ms)

    @property
    def decided_median_ms(self) -> float:
        return statistics.median(self.decided_ms)


# -- cluster_state, its own process ------------------------------------------------------------------


class ClusterStateProcess:
    """``python -m cluster_state`` with the bench's environment; its CPU seconds from the kernel: the
    scheduler's nanosecond run time of each of its threads (``/proc/<pid>/task/*/schedstat``), else
    ``psutil``'s user + system time (in clock ticks, 10 ms)."""

    def __init__(self, process: asyncio.subprocess.Process, log: Path) -> None:
        self.process = process
        self.log = log
        self.ps = psutil.Process(process.pid)

    def cpu_s(self) -> float:
        self.check()
        tasks = Path(f"/proc/{self.process.pid}/task")
        try:
            total_ns = 0
            for task in tasks.iterdir():
                with contextlib.suppress(FileNotFoundError):  # a thread that ended meanwhile
                    total_ns += int((task / "schedstat").read_text().split()[0])
            return total_ns / 1e9
        except OSError:
            times = self.ps.cpu_times()
            return float(times.user + times.system)

    def rss_mib(self) -> float:
        return float(self.ps.memory_info().rss) / 2**20

    def check(self) -> None:
        if self.process.returncode is not None:
            raise RuntimeError(f"cluster_state exited with {self.process.returncode}:\n{self.tail()}")

    def tail(self, chars: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no log)"


@contextlib.asynccontextmanager
async def cluster_state(
    nats_url: str, database_url: str, manifest: Path, log: Path, profile: Path | None
) -> AsyncIterator[ClusterStateProcess]:
    env = {
        **os.environ,
        "NRT_NATS_URL": nats_url,
        "NRT_DATABASE_URL": database_url,
        "NRT_MANIFEST": str(manifest),
        "NRT_LOG_LEVEL": "WARNING",
    }
    for unset in ("NRT_API_KEY", "NRT_ADMIN_KEY", "NRT_HEARTBEAT_S", "NRT_MISSED_HEARTBEATS"):
        env.pop(unset, None)  # the production heartbeat, and no keys to record
    runner = ["-m", "cProfile", "-o", str(profile)] if profile is not None else []
    with log.open("ab") as out:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            *runner,
            "-m",
            "cluster_state",
            env=env,
            stdout=out,
            stderr=out,
            start_new_session=True,
            preexec_fn=dies_with_parent(signal.SIGKILL),
        )
    child = ClusterStateProcess(process, log)
    try:
        yield child
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), 20)
            except TimeoutError:
                process.kill()
                await process.wait()


async def fetch_state(nc: Client) -> tuple[ClusterState, bytes]:
    """cluster_state's folded state (``nrt.state.get``) and its bytes on the wire."""
    reply = await nc.request(subjects.STATE, b"{}", timeout=10)
    return msgspec.json.decode(reply.data, type=ClusterState), reply.data


async def until(
    nc: Client, what: str, ready: Callable[[ClusterState], bool], child: ClusterStateProcess, within: float
) -> ClusterState:
    """Poll the folded state until ``ready``; RuntimeError naming ``what`` after ``within`` seconds."""
    deadline = time.monotonic() + within
    while True:
        child.check()
        with contextlib.suppress(nats.errors.NoRespondersError, nats.errors.TimeoutError):
            state, _ = await fetch_state(nc)
            if ready(state):
                return state
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not within {within:g}s\ncluster_state's log:\n{child.tail()}")
        await asyncio.sleep(0.25)


def settled(workers: int) -> Callable[[ClusterState], bool]:
    """Every fleet worker alive in the log, and every specialist placed at its declared tier."""

    def check(state: ClusterState) -> bool:
        alive = sum(1 for w in state.workers.values() if w.alive and w.role is WorkerRole.SPECIALIST)
        if alive != workers:
            return False
        for model_id, tier in SPECIALISTS.items():
            model = state.models.get(model_id)
            if model is None or tier not in {p.tier for p in model.placements.values()}:
                return False
        return True

    return check


# -- the fleet -------------------------------------------------------------------------------------


def batches(items: list[SimWorker], size: int) -> Iterator[list[SimWorker]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


async def start_fleet(nats_url: str, fleet: list[SimWorker]) -> None:
    for batch in batches(fleet, CONNECT_BATCH):
        await asyncio.gather(*(worker.connect(nats_url) for worker in batch))
    for batch in batches(fleet, CONNECT_BATCH):
        await asyncio.gather(*(worker.join() for worker in batch))


async def probe_join(nats_url: str, index: int) -> float:
    """A router host joins; the milliseconds from its ``WorkerJoined`` to the entry model's load command."""
    probe = SimWorker(probe_id(index), role=WorkerRole.ROUTER, ram_bytes=WORKER_RAM, model_bytes=MODEL_BYTES)
    await probe.connect(nats_url)
    try:
        joined_at = await probe.join()
        arrival = await probe.first_command(ENTRY, after=joined_at, within=JOIN_WITHIN)
        await asyncio.sleep(2 * HEARTBEAT_S)  # its load is carried out and beaten about, as a worker's would be
        await probe.leave()
    finally:
        await probe.close()
    return (arrival.at - joined_at) * 1e3


def decided_ms(database_url: str, probes: int) -> list[float]:
    """Each probe's ``WorkerJoined`` to the entry model's ``ModelPlaced`` on it, by their ``occurred_at`` in the log."""
    joined: dict[str, datetime] = {}
    placed: dict[str, datetime] = {}
    with psycopg.connect(to_libpq(database_url)) as conn:
        rows = conn.execute(
            "SELECT body::text, schema_version FROM events WHERE type IN ('WorkerJoined', 'ModelPlaced') "
            "ORDER BY position"
        )
        for body, version in rows:
            event = decode(body.encode(), version)
            if isinstance(event, WorkerJoined):
                joined.setdefault(event.worker_id, event.occurred_at)
            elif isinstance(event, ModelPlaced) and event.model_id == ENTRY:
                placed.setdefault(event.worker_id, event.occurred_at)
    ids = [probe_id(i) for i in range(probes)]
    missing = [i for i in ids if i not in joined or i not in placed]
    if missing:
        raise RuntimeError(f"the log lacks the join or the placement of {', '.join(missing)}")
    return [(placed[i] - joined[i]).total_seconds() * 1e3 for i in ids]


def probe_id(index: int) -> str:
    return f"probe-{index}"


async def measure(
    server: str, workers: int, duration: float, probes: int, tmp: Path, profile_dir: Path | None
) -> SizeRun:
    manifest = tmp / "bench-cluster.yaml"
    manifest.write_text(MANIFEST)
    profile = profile_dir / f"cluster_state-{workers}.prof" if profile_dir is not None else None
    with (
        nats_server(tmp / f"nats-{workers}", env_var=None, use_docker=False) as nats_url,
        fresh_database(server) as database_url,
    ):
        nc = await nats.connect(nats_url, name="bench.cluster")
        fleet = [SimWorker(f"w{i:04d}", ram_bytes=WORKER_RAM, model_bytes=MODEL_BYTES) for i in range(workers)]
        try:
            log = tmp / f"cluster_state-{workers}.log"
            async with cluster_state(nats_url, database_url, manifest, log, profile) as child:
                await until(nc, "cluster_state applies the manifest", lambda s: s.manifest_version >= 1, child, 60)
                await asyncio.sleep(1.0)
                idle_cpu_s, idle_s = await cpu_over(child, duration)

                started = time.perf_counter()
                await start_fleet(nats_url, fleet)
                await until(nc, f"{workers} workers joined and placed", settled(workers), child, READY_WITHIN)
                fleet_s = time.perf_counter() - started
                await asyncio.sleep(4 * HEARTBEAT_S)  # every worker beating, the placements' replies in

                beats_before = sum(w.beats for w in fleet)
                steady_cpu_s, steady_s = await cpu_over(child, duration)
                beats = sum(w.beats for w in fleet) - beats_before
                rss_mib = child.rss_mib()

                state, body = await fetch_state(nc)
                alive = sum(1 for w in state.workers.values() if w.alive)
                if alive != workers:
                    raise RuntimeError(f"the log shows {alive} workers alive after the steady window, not {workers}")
                snapshot_bytes = len(encode_state(state))

                join_ms = [await probe_join(nats_url, i) for i in range(probes)]
                child.check()
            decided = decided_ms(database_url, probes)
        finally:
            await asyncio.gather(*(worker.close() for worker in fleet), return_exceptions=True)
            await nc.close()
    return SizeRun(
        workers=workers,
        idle_cpu_s=idle_cpu_s,
        idle_s=idle_s,
        steady_cpu_s=steady_cpu_s,
        steady_s=steady_s,
        beats=beats,
        fleet_s=fleet_s,
        join_ms=tuple(join_ms),
        decided_ms=tuple(decided),
        state_bytes=len(body),
        snapshot_bytes=snapshot_bytes,
        rss_mib=rss_mib,
    )


async def cpu_over(child: ClusterStateProcess, duration: float) -> tuple[float, float]:
    """cluster_state's CPU seconds over ``duration`` seconds of wall time, and the wall time measured."""
    cpu, started = child.cpu_s(), time.perf_counter()
    await asyncio.sleep(duration)
    return child.cpu_s() - cpu, time.perf_counter() - started


# -- the report ------------------------------------------------------------------------------------


def print_report(runs: list[SizeRun], policies: list[PolicyCost]) -> None:
    first, first_policy = runs[0], policies[0]
    print(
        f"{'workers':>8} {'idle %cpu':>10} {'steady %cpu':>12} {'beats/s':>8} {'us/beat':>8} {'raw us/beat':>12} "
        f"{'join ms':>8} {'decided ms':>11} {'fleet s':>8} {'state B':>9} {'snap B':>9} {'rss MiB':>8} "
        f"{'tick us':>8} {'beat us':>7}"
    )
    for run, policy in zip(runs, policies, strict=True):
        print(
            f"{run.workers:>8} {run.idle_cpu_s / run.idle_s * 100:>10.2f} "
            f"{run.steady_cpu_s / run.steady_s * 100:>12.2f} {run.beats / run.steady_s:>8.0f} "
            f"{run.cpu_per_beat_us:>8.1f} {run.raw_cpu_per_beat_us:>12.1f} {run.join_median_ms:>8.1f} "
            f"{run.decided_median_ms:>11.1f} {run.fleet_s:>8.2f} {run.state_bytes:>9,} {run.snapshot_bytes:>9,} "
            f"{run.rss_mib:>8.1f} {policy.tick_us:>8.1f} {policy.heartbeat_us:>7.1f}"
        )
    smallest = f"{first.workers} workers"

    def figure(name: str, value: float, unit: str, reference: float, precision: int, target: bool = True) -> None:
        report(name, value, unit, value / reference, smallest, f"<= {TARGET}" if target else "", precision)

    for run, policy in zip(runs, policies, strict=True):
        n = run.workers
        figure(f"CPU per heartbeat at {n} workers", run.cpu_per_beat_us, "us", first.cpu_per_beat_us, 1)
        figure(f"join -> load command at {n} workers", run.join_median_ms, "ms", first.join_median_ms, 1)
        figure(f"join -> ModelPlaced (log) at {n} workers", run.decided_median_ms, "ms", first.decided_median_ms, 1)
        figure(f"fold size at {n} workers", run.snapshot_bytes, "bytes", first.snapshot_bytes, 0, target=False)
        per_worker = run.snapshot_bytes / n
        figure(f"fold size per worker at {n} workers", per_worker, "bytes", first.snapshot_bytes / first.workers, 0)
        first_tick = first_policy.tick_us_per_worker_s
        figure(f"ticks' policies per worker at {n} workers", policy.tick_us_per_worker_s, "us/s", first_tick, 2)
        figure(f"heartbeat bookkeeping at {n} workers", policy.heartbeat_us, "us", first_policy.heartbeat_us, 2)
    last = runs[-1]
    if len(runs) > 1:
        # what each worker added between the smallest and the largest fleet: superlinear growth shows here first
        added = (last.marginal_cpu_s / last.steady_s - first.marginal_cpu_s / first.steady_s) * 1e3
        slope = added / (last.workers - first.workers)
        figure(f"added cost per worker {first.workers} -> {last.workers}", slope, "ms/s", first.per_worker_ms_per_s, 4)
    ratio = last.per_worker_ms_per_s / first.per_worker_ms_per_s
    report(
        f"per-worker cost at {last.workers} workers",
        last.per_worker_ms_per_s,
        "ms/s",
        ratio,
        smallest,
        f"<= {TARGET}",
        4,
        met=ratio <= TARGET,
    )


async def main(sizes: list[int], duration: float, probes: int, database_url: str | None, profile: Path | None) -> None:
    print(
        f"cluster: cluster_state with {', '.join(map(str, sizes))} simulated workers (one NATS connection each, "
        f"heartbeats every {HEARTBEAT_S:g}s), {duration:g}s idle and steady windows, {probes} join probes",
        flush=True,
    )
    runs: list[SizeRun] = []
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="nrt-bench-cluster-")))
        server = database_url or stack.enter_context(postgres())
        for workers in sizes:
            run = await measure(server, workers, duration, probes, tmp, profile)
            print(
                f"{workers} workers: {run.cpu_per_beat_us:.1f} us of cluster_state CPU per heartbeat, "
                f"join to placement {run.join_median_ms:.1f} ms, fold {run.snapshot_bytes:,} bytes",
                flush=True,
            )
            runs.append(run)
    policies = [cluster_policies.measure(MANIFEST, SPECIALISTS, n, WORKER_RAM) for n in sizes]
    print_report(runs, policies)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, nargs="+", default=[10, 50, 200], help="fleet sizes, smallest first")
    parser.add_argument("--duration", type=float, default=20.0, help="seconds of each idle and steady window")
    parser.add_argument("--probes", type=int, default=5, help="router hosts that join, one at a time, per size")
    parser.add_argument("--database-url", help="a PostgreSQL server (default: NRT_DATABASE_URL's, else embedded)")
    parser.add_argument("--profile", type=Path, metavar="DIR", help="run cluster_state under cProfile, files here")
    args = parser.parse_args()
    if any(n < 1 for n in args.workers) or args.duration <= 0 or args.probes < 1:
        parser.error("--workers and --probes must be positive, --duration above 0")
    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)
    asyncio.run(main(sorted(set(args.workers)), args.duration, args.probes, args.database_url, args.profile))
