"""How the remote tier talks to an endpoint: its timeouts and connect retries (``NRT_WORKER_REMOTE_*``)."""

from __future__ import annotations

from dataclasses import dataclass

from nrt.adapters.catalogue.sources import HF_INFERENCE_URL


@dataclass(frozen=True, slots=True)
class RemotePolicy:
    connect_timeout_s: float = 5.0  # to open a connection to the endpoint
    read_timeout_s: float = 60.0  # the longest the endpoint may send nothing (before its answer, or in a stream)
    connect_attempts: int = 3  # connections tried before the request fails (1: no retry)
    retry_backoff_s: float = 0.25  # the wait before the second attempt; doubled before each later one
    hf_inference_url: str = HF_INFERENCE_URL  # serves an hf:// model at tier remote that names no base_url
