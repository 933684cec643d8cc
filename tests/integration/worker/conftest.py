"""A real specialist worker, in-process, on real NATS, hosting tiny real ONNX models; and its jobs without NATS."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from faststream.nats import NatsBroker

from nrt.hosting.resources import detect
from nrt.hosting.worker import Worker
from shell_fakes import Jobs


@pytest.fixture
async def worker(broker: NatsBroker, nrt_home: Path) -> AsyncIterator[Worker]:
    w = Worker(broker, detect(), worker_id="w-test", max_batch_size=8)
    await w.start()
    yield w
    await w.stop()


@pytest.fixture
def jobs(nrt_home: Path) -> Iterator[Jobs]:
    """The worker's jobs on a real ModelHost (tiny real models), with an in-memory shell instead of NATS."""
    built = Jobs.build()
    yield built
    built.host.close()
