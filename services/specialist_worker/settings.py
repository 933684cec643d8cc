"""specialist_worker settings from the environment (every NRT_WORKER_* variable)."""

from __future__ import annotations

from pydantic import Field, field_validator

from nrt.adapters.catalogue.sources import HF_INFERENCE_URL
from nrt.adapters.inference import Spin
from nrt.adapters.inference.batching import DEFAULT_PREFIX_CACHE_BYTES
from nrt.adapters.settings import HeartbeatSettings
from nrt.core.units import parse_size
from nrt.hosting.remote.policy import RemotePolicy


class WorkerSettings(HeartbeatSettings):
    """What a worker reads: the shared settings, the heartbeat, its identity and capacity."""

    worker_id: str | None = Field(
        default=None,
        description="the worker's id",
        json_schema_extra={"default_text": "the host name and a random suffix"},
    )
    worker_ram: int | None = Field(
        default=None,
        description="the memory the worker offers for models (`8GB`)",
        json_schema_extra={"default_text": "the host's memory"},
    )
    worker_max_batch: int = Field(default=16, ge=1, description="how many requests a model runs in one batch")
    worker_prefix_cache: int = Field(
        default=DEFAULT_PREFIX_CACHE_BYTES,
        ge=0,
        description="the KV of shared prompt prefixes (a specialist's template, a long system prompt) a worker keeps "
        "per model, at most (`64MB`; `0`: none): a prompt that starts with a held prefix prefills only the rest "
        "(`cached_tokens`); the least recently used prefixes go beyond it (`PrefixKvEvicted`)",
        json_schema_extra={"default_text": "`64MB`"},
    )
    worker_max_queue: int = Field(
        default=64,
        ge=1,
        description="requests per model a worker holds at once (running or waiting for a batch row); one more is "
        "refused at once with `overloaded` (HTTP 429 with `Retry-After`)",
    )
    worker_ort_threads: int | None = Field(
        default=None,
        ge=1,
        description="ONNX Runtime intra-op threads per model session (`1` suits small models on a host shared "
        "with the other services)",
        json_schema_extra={"default_text": "ONNX Runtime's: one per core"},
    )
    worker_share_artifacts: bool = Field(
        default=True,
        description="fetch a model's prepared artifact from the cluster's JetStream object store (`NRT_ARTIFACTS`) "
        "before preparing it here, and publish what this worker prepared there; `0`: every host prepares its own",
    )
    worker_ort_spin: Spin = Field(
        default="never",
        description="when ONNX Runtime's threads spin-wait for work: `never`, every wait sleeps (cores shared with the "
        "other services); `run`, between a run's operators and not once it returns (a decode step is hundreds of short "
        "operators: 15-20% faster on Gemma 3 270M, for a worker with its cores to itself); `always`, between runs too",
    )

    worker_remote_connect_timeout: float = Field(
        default=5.0, gt=0, description="seconds to open a connection to a remote-tier endpoint"
    )
    worker_remote_read_timeout: float = Field(
        default=60.0,
        gt=0,
        description="seconds a remote-tier endpoint may send nothing (before its answer, or within a stream) "
        "before the request fails with 504",
    )
    worker_remote_connect_attempts: int = Field(
        default=3,
        ge=1,
        description="connections tried to a remote-tier endpoint before the request fails with 502 (only a failed "
        "connect is retried: a request that reached the endpoint is never sent twice)",
    )
    worker_hf_inference_url: str = Field(
        default=HF_INFERENCE_URL,
        pattern=r"^https?://[^/?#]+(/[^?#]*)?$",
        description="the OpenAI-compatible API root that serves an hf://org/name model declared at tier remote "
        "(the repository id is the model's name; its key in $HF_TOKEN unless api_key_env names another) when its "
        "manifest entry names no base_url: Hugging Face's inference router, or a vLLM or TGI server of Hub models",
    )

    def remote_policy(self) -> RemotePolicy:
        return RemotePolicy(
            connect_timeout_s=self.worker_remote_connect_timeout,
            read_timeout_s=self.worker_remote_read_timeout,
            connect_attempts=self.worker_remote_connect_attempts,
            hf_inference_url=self.worker_hf_inference_url.rstrip("/"),
        )

    @field_validator("worker_ram", "worker_prefix_cache", mode="before")
    @classmethod
    def _size(cls, value: object) -> object:
        return parse_size(value) if isinstance(value, str) else value

    @field_validator("worker_ort_spin", mode="before")
    @classmethod
    def _spin(cls, value: object) -> object:
        """The yes/no this setting was before it named a policy: `1` spun between runs (`always`), `0` never."""
        return {"1": "always", "0": "never"}.get(value, value) if isinstance(value, str) else value
