"""The worker's jobs on real models, without NATS: an in-memory shell that records what they ask of it.

``Shell`` provides every port of ``nrt.hosting.shell_ports`` (events, heartbeats, model
subjects, the promotion request to cluster_state) and keeps one ordered list of the calls,
so a test can check both what happened and in which order.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

from nrt.adapters.bus.errors import Unavailable
from nrt.adapters.inference import ArtifactRegistry
from nrt.core.events import Event
from nrt.core.manifest import ModelSpec
from nrt.core.protocol import ControlCommand, ControlReply, PromoteModel, PromoteResult, WorkerHeartbeat
from nrt.hosting.control import Control
from nrt.hosting.model_host import ModelHost
from nrt.hosting.serving import Serving
from nrt.hosting.tiers import Tiers

LLAMA = "catalogue://tiny-llama"
PROMPT = "The quick brown fox"

T = TypeVar("T")

Answer = Callable[[PromoteModel], Awaitable[PromoteResult]]


@dataclass(frozen=True)
class Subscribed:
    model_id: str


@dataclass(frozen=True)
class Unsubscribed:
    model_id: str


@dataclass
class Shell:
    """Records every call in order; ``answer`` plays cluster_state on ``nrt.models.promote`` (None: nobody serves it)."""

    calls: list[object] = field(default_factory=list)
    answer: Answer | None = None
    specs: dict[str, ModelSpec] = field(default_factory=dict)

    def emit(self, event: Event) -> None:
        self.calls.append(event)

    async def publish(self, event: Event) -> int:
        self.calls.append(event)
        return len(self.calls)

    async def send_heartbeat(self, beat: WorkerHeartbeat) -> None:
        self.calls.append(beat)

    async def subscribe(self, model_id: str) -> None:
        self.calls.append(Subscribed(model_id))

    async def unsubscribe(self, model_id: str) -> None:
        self.calls.append(Unsubscribed(model_id))

    async def ask_promotion(self, ask: PromoteModel) -> PromoteResult:
        self.calls.append(ask)
        if self.answer is None:
            raise Unavailable("nothing is serving nrt.models.promote", code="no_responders")
        return await self.answer(ask)

    def spec(self, model_id: str) -> ModelSpec | None:
        return self.specs.get(model_id)

    def of(self, kind: type[T]) -> list[T]:
        return [call for call in self.calls if isinstance(call, kind)]


@dataclass
class Jobs:
    """Tiers, control and serving of one worker (``w-jobs``) on a real ModelHost, wired to ``shell``."""

    shell: Shell
    host: ModelHost
    tiers: Tiers
    control: Control
    serving: Serving

    @classmethod
    def build(cls) -> Jobs:
        shell = Shell()
        host = ModelHost(ArtifactRegistry(), max_batch_size=4)
        tiers = Tiers("w-jobs", host, shell, shell.spec, shell)
        control = Control("w-jobs", host, tiers, shell, shell.ask_promotion)
        return cls(shell, host, tiers, control, Serving("w-jobs", host, control, shell, shell.spec))

    async def command(self, action: str, model_id: str, reason: str = "command", **fields: object) -> ControlReply:
        command = ControlCommand(action=action, model_id=model_id, reason=reason, **fields)  # type: ignore[arg-type]
        return await self.control.handle(command)
