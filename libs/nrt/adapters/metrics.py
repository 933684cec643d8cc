"""Every Prometheus metric NRT exports, defined in one place (``prometheus-client``).

Each service owns one ``CollectorRegistry`` (so services sharing a process, as in the
in-process tests, keep their figures apart) and serves it: the gateway on its HTTP port
at ``GET /metrics``, every service on its own metrics port (``NRT_METRICS_PORT``,
``serve_metrics``). The services record; the pure core (``nrt.core.state``, ``nrt.core.policies``)
knows nothing of metrics: figures derived from the folded ``ClusterState`` are computed
from it on each scrape (``ClusterCollector``).

Names follow Prometheus conventions: ``nrt_`` prefix, base units (seconds, bytes) in the
name, ``_total`` for counters. ``defined_families()`` names every family a scrape can show.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    start_http_server,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from nrt.core.manifest import Manifest
from nrt.core.state import ClusterState
from nrt.core.vocabulary import Tier

log = logging.getLogger("nrt.adapters.metrics")

# no ``_created`` series beside each counter and histogram: Prometheus has no use for them
disable_created_metrics()  # type: ignore[no-untyped-call]

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
TOKEN_GAP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
CONFIDENCE_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64)
APPEND_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)
COLD_START_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 120.0)
DRAIN_BUCKETS = (0.01, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0)

# route outcomes: how a request found the model that answered it
DIRECT = "direct"  # the request named a model
INTENT = "intent"  # the router chose an intent's specialist
FALLBACK = "fallback"  # no intent was confident enough: the manifest's fallback model answered
ENTRY = "entry"  # no intent was confident enough and no fallback: the entry model answered itself
UNROUTED = "unrouted"  # a routed request that failed before the router's decision came back


def route_outcome(intent: str | None, target: str, entry: str) -> str:
    """The route outcome of one router decision."""
    if intent is not None:
        return INTENT
    return ENTRY if target == entry else FALLBACK


class GatewayMetrics:
    """The HTTP side, per request: outcome, latency, time to first token, token gaps, tokens."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "nrt_requests_total",
            "Chat completion requests answered, by answering model, route outcome and HTTP status",
            ["model", "outcome", "status"],
            registry=r,
        )
        self.duration = Histogram(
            "nrt_request_duration_seconds",
            "End-to-end latency of a chat completion, from its arrival to its last token",
            ["model"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.ttft = Histogram(
            "nrt_time_to_first_token_seconds",
            "Time from a request's arrival to its first token",
            ["model"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.inter_token = Histogram(
            "nrt_inter_token_latency_seconds",
            "Time between two consecutive chunks of text of one answer",
            ["model"],
            buckets=TOKEN_GAP_BUCKETS,
            registry=r,
        )
        self.tokens = Counter(
            "nrt_tokens_total",
            "Tokens of completed requests: direction=in (prompt) or out (completion)",
            ["model", "direction"],
            registry=r,
        )


class RouterMetrics:
    """router_svc's decisions: how often each intent is chosen, how confidently, and the fallbacks."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.decisions = Counter(
            "nrt_router_decisions_total",
            "Router decisions by intent ('none': none confident enough) and outcome (intent, fallback, entry)",
            ["intent", "outcome"],
            registry=self.registry,
        )
        self.confidence = Histogram(
            "nrt_router_confidence",
            "The router's confidence in its chosen (or best) intent, per decision",
            ["intent"],
            buckets=CONFIDENCE_BUCKETS,
            registry=self.registry,
        )

    def decided(self, intent: str | None, target: str, entry: str, confidence: float) -> None:
        label = intent if intent is not None else "none"
        self.decisions.labels(label, route_outcome(intent, target, entry)).inc()
        self.confidence.labels(label).observe(confidence)


@dataclass(frozen=True, slots=True)
class ModelLoad:
    """What one worker reports of one hosted model at a scrape."""

    model_id: str
    tier: str
    bytes_held: int
    queued: int  # requests waiting for a batch row
    running: int  # rows decoding or prefilling


class WorkerMetrics:
    """A worker's models: tier transitions, cold starts, batch sizes; queue depth and bytes on scrape."""

    def __init__(self, worker_id: str, registry: CollectorRegistry | None = None) -> None:
        self.worker_id = worker_id
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.transitions = Counter(
            "nrt_tier_transitions_total",
            "Tier changes of hosted models, by model, from and to tier, and reason",
            ["worker", "model", "from_tier", "to_tier", "reason"],
            registry=r,
        )
        self.cold_start = Histogram(
            "nrt_cold_start_seconds",
            "Time to make a standby model resident for a request that found it standby",
            ["worker", "model"],
            buckets=COLD_START_BUCKETS,
            registry=r,
        )
        self.batch_size = Histogram(
            "nrt_batch_size",
            "Rows in each batched decode step",
            ["worker", "model"],
            buckets=BATCH_BUCKETS,
            registry=r,
        )

    def batch_observer(self, model_id: str) -> Callable[[int], None]:
        """What a batcher calls with each decode step's size (from its own thread: the client is thread-safe)."""
        child = self.batch_size.labels(self.worker_id, model_id)
        return child.observe

    def watch(self, loads: Callable[[], Iterable[ModelLoad]]) -> None:
        """Report queue depth, running rows and bytes of the hosted models ``loads`` lists, at each scrape."""
        self.registry.register(_WorkerCollector(self.worker_id, loads))


class _WorkerCollector(Collector):
    def __init__(self, worker_id: str, loads: Callable[[], Iterable[ModelLoad]]) -> None:
        self.worker_id, self.loads = worker_id, loads

    def collect(self) -> Iterator[Metric]:
        queue = GaugeMetricFamily(
            "nrt_queue_depth", "Requests waiting for a batch row, per model", labels=["worker", "model"]
        )
        running = GaugeMetricFamily(
            "nrt_batch_rows", "Rows decoding or prefilling now, per model", labels=["worker", "model"]
        )
        held = GaugeMetricFamily(
            "nrt_model_bytes",
            "Bytes a hosted model holds on this worker, by tier (the worker's own measure)",
            labels=["worker", "model", "tier"],
        )
        for load in self.loads():
            queue.add_metric([self.worker_id, load.model_id], load.queued)
            running.add_metric([self.worker_id, load.model_id], load.running)
            held.add_metric([self.worker_id, load.model_id, load.tier], load.bytes_held)
        yield from (queue, running, held)

    def describe(self) -> Iterator[Metric]:
        return iter(())  # computed at each scrape: nothing to check at registration


class StateMetrics:
    """cluster_state: the recorder's append latency and lag, and the drains of manifest swaps."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.append = Histogram(
            "nrt_event_append_seconds",
            "Time to append one batch of events (and its checkpoint) to the PostgreSQL log",
            buckets=APPEND_BUCKETS,
            registry=r,
        )
        self.recorded = Counter("nrt_events_recorded_total", "Events recorded in the PostgreSQL log", registry=r)
        self.rejected = Counter(
            "nrt_events_rejected_total", "Events refused: their subject may not carry their type", registry=r
        )
        self.lost = Counter(
            "nrt_events_lost_total",
            "Stream messages its retention limits dropped before they were recorded (never in the log)",
            registry=r,
        )
        self.stream_sequence = Gauge(
            "nrt_event_stream_sequence", "The JetStream event stream's last sequence, as last seen", registry=r
        )
        self.log_sequence = Gauge(
            "nrt_event_log_sequence", "The stream sequence the PostgreSQL log has recorded up to", registry=r
        )
        self.lag = Gauge(
            "nrt_event_log_lag",
            "Events in the JetStream stream not yet recorded in PostgreSQL (stream sequence - log position)",
            registry=r,
        )
        self.drain = Histogram(
            "nrt_drain_seconds",
            "How long manifest swaps waited for in-flight requests, by outcome",
            ["outcome"],
            buckets=DRAIN_BUCKETS,
            registry=r,
        )

    def positions(self, stream: int, recorded: int) -> None:
        self.stream_sequence.set(stream)
        self.log_sequence.set(recorded)
        self.lag.set(max(stream - recorded, 0))


class ClusterCollector(Collector):
    """Figures of the folded ``ClusterState``, computed at each scrape: bytes held per worker and tier
    against the manifest's budgets and each worker's capacity; with ``sessions``, live and evicted
    sessions (only a fold of every event has them: cluster_state's, not the gateway's)."""

    def __init__(
        self, state: Callable[[], ClusterState], manifest: Callable[[], Manifest | None], sessions: bool = False
    ) -> None:
        self.state, self.manifest, self.sessions = state, manifest, sessions

    def collect(self) -> Iterator[Metric]:
        cluster, manifest = self.state(), self.manifest()
        yield from tier_figures(cluster, manifest)
        if self.sessions:
            live = GaugeMetricFamily("nrt_sessions_live", "Conversation sessions open in the cluster")
            live.add_metric([], len(cluster.sessions))
            evicted = CounterMetricFamily("nrt_sessions_evicted", "Sessions whose KV cache was evicted")
            evicted.add_metric([], cluster.counters.kv_evictions)
            yield from (live, evicted)

    def describe(self) -> Iterator[Metric]:
        return iter(())


def tier_figures(cluster: ClusterState, manifest: Manifest | None) -> list[Metric]:
    """Bytes held per live worker and tier (placements as workers reported them), each worker's
    capacity per tier, and the manifest's budget per tier."""
    held = GaugeMetricFamily(
        "nrt_tier_bytes", "Bytes held per worker and tier, as workers reported them", labels=["worker", "tier"]
    )
    capacity = GaugeMetricFamily(
        "nrt_worker_capacity_bytes",
        "Memory a worker has for a tier: accelerator (or RAM on a CPU host) for resident, RAM for standby",
        labels=["worker", "tier"],
    )
    budget = GaugeMetricFamily(
        "nrt_tier_budget_bytes", "The manifest's budget per tier (gpu_budget, ram_budget)", labels=["tier"]
    )
    sums: dict[tuple[str, str], int] = {}
    for worker in cluster.workers.values():
        if not worker.alive:
            continue
        for tier in (Tier.RESIDENT, Tier.STANDBY):
            sums[(worker.worker_id, tier.value)] = 0
        resident_cap = worker.accelerator_bytes if worker.accelerator else worker.ram_bytes
        capacity.add_metric([worker.worker_id, Tier.RESIDENT.value], resident_cap)
        capacity.add_metric([worker.worker_id, Tier.STANDBY.value], worker.ram_bytes)
    for model in cluster.models.values():
        for placement in model.placements.values():
            key = (placement.worker_id, placement.tier.value)
            if key in sums:
                sums[key] += placement.bytes_held
    for (worker_id, tier_name), total in sorted(sums.items()):
        held.add_metric([worker_id, tier_name], total)
    if manifest is not None:
        for tier, limit in (
            (Tier.RESIDENT, manifest.resources.gpu_budget),
            (Tier.STANDBY, manifest.resources.ram_budget),
        ):
            if limit is not None:
                budget.add_metric([tier.value], limit)
    return [held, capacity, budget]


class MetricsServer:
    """A registry served over HTTP (``/metrics``) from a daemon thread."""

    def __init__(self, registry: CollectorRegistry, port: int, host: str = "0.0.0.0") -> None:
        self._httpd: Any
        self._httpd, self._thread = start_http_server(port, addr=host, registry=registry)
        self.port: int = self._httpd.server_port

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


def serve_metrics(
    name: str, registry: CollectorRegistry, port: int | None, host: str = "0.0.0.0"
) -> MetricsServer | None:
    """Serve ``registry`` on ``port`` (0: a free one; None: not at all); the server, to close at the end."""
    if port is None:
        return None
    server = MetricsServer(registry, port, host)
    log.info("%s serves its metrics at http://%s:%d/metrics", name, host, server.port)
    return server


def defined_families() -> frozenset[str]:
    """Every family name a scrape of some NRT service can show (as the parser names them: counters
    without ``_total``), read from the definitions above."""
    registry = CollectorRegistry()
    GatewayMetrics(registry)
    RouterMetrics(registry)
    WorkerMetrics("-", registry).watch(lambda: ())
    StateMetrics(registry)
    registry.register(ClusterCollector(ClusterState, lambda: None, sessions=True))
    return frozenset(metric.name for metric in registry.collect())
