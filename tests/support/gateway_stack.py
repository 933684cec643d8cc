"""Fixtures of a running gateway stack: NRT_HOME with the tiny models, and the stack per module.

Imported by the conftests of the gateway's integration tests, the browser test and the fuzz test.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio

from harness import Stack, start_stack
from nrt.testing.stacks import link_tiny_models


@pytest.fixture(scope="module")
def module_nrt_home(tiny_artifacts: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """NRT_HOME for a whole module: its models/ holds the tiny artifacts as catalogue entries."""
    home = link_tiny_models(tmp_path_factory.mktemp("nrt-home"), tiny_artifacts)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("NRT_HOME", str(home))
        yield home


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(nats_url: str, module_nrt_home: Path) -> AsyncIterator[Stack]:
    """The tiny customer-support cluster: worker, router_svc and gateway, shared by a module's tests."""
    async with start_stack(nats_url, "tiny-support.yaml") as running:
        yield running
