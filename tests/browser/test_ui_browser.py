"""The dashboard at ``/ui`` in a real headless Chromium, on the real stack with cluster_state on PostgreSQL.

It shows the workers, models and tiers that ``/v1/cluster`` holds, and a routed request appears in
its live event feed and its routing panel within 2 s. A screenshot is saved under the test's
``tmp_path``. Without a Chromium executable (Debian's ``chromium``; ``scripts/test`` installs it
when it can) or Playwright, the test is skipped and says why.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from harness import API_KEY, start_stack
from nrt.adapters.store import EventStore

playwright_api = pytest.importorskip("playwright.async_api", reason="Playwright is not installed (the dev extra)")

ROUTED_WITHIN_S = 2.0
BILLING = "I was charged twice for my order"


def chromium_executable() -> str:
    found = os.environ.get("NRT_TEST_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.skip("no Chromium executable (install Debian's `chromium`: `apt-get install -y chromium`)")
    return found


def placements(state: dict[str, Any]) -> set[tuple[str, str, str]]:
    """(worker, model, tier) of every placement in a ``/v1/cluster`` answer."""
    return {
        (worker_id, model["model_id"], placement["tier"])
        for model in state["models"].values()
        for worker_id, placement in model["placements"].items()
    }


async def test_dashboard_shows_the_cluster_and_a_routed_request_live(
    nats_url: str, nrt_home: object, database_url: str, event_store: EventStore, tmp_path: Path
) -> None:
    executable = chromium_executable()
    async with start_stack(nats_url, "tiny-support.yaml", database_url=database_url) as stack, stack.http() as http:
        declared = {spec.id for spec in stack.manifest.models}
        deadline = time.monotonic() + 30
        while {m for _, m, _ in placements((await http.get("/v1/cluster")).json())} != declared:
            assert time.monotonic() < deadline, "cluster_state did not place every model of the manifest"
            await asyncio.sleep(0.2)

        async with playwright_api.async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=executable, args=["--no-sandbox"])
            try:
                page = await browser.new_page(viewport={"width": 1400, "height": 1000})
                await page.goto(f"{stack.base_url}/ui")
                await page.fill("#api-key", API_KEY)
                await page.click("#key-form button[type=submit]")

                # the workers, models and tiers shown are those of /v1/cluster
                shown: set[tuple[str, str, str]] = set()
                expected: set[tuple[str, str, str]] = set()
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline:
                    expected = placements((await http.get("/v1/cluster")).json())
                    rows = await page.locator("#workers tr[data-model]").all()
                    shown = {
                        (
                            await r.get_attribute("data-worker") or "",
                            await r.get_attribute("data-model") or "",
                            await r.get_attribute("data-tier") or "",
                        )
                        for r in rows
                    }
                    if shown == expected:
                        break
                    await asyncio.sleep(0.2)
                assert shown == expected, f"the dashboard shows {sorted(shown)}, /v1/cluster holds {sorted(expected)}"
                assert {m for _, m, _ in shown} == declared
                cluster_name = await page.text_content("#cluster-name")
                assert cluster_name == stack.manifest.cluster
                await page.wait_for_selector("#feed li[data-type=ManifestApplied]", timeout=5000)

                # a routed request shows in the live feed and the routing panel within 2 s
                answer = await stack.client().chat.completions.with_raw_response.create(
                    model="router",
                    messages=[{"role": "user", "content": BILLING}],
                    max_tokens=3,
                    extra_headers={"X-NRT-Session": "ui-session"},
                )
                request_id = answer.headers["X-NRT-Request-Id"]
                answered = time.monotonic()
                routed = page.locator(f'#routing tr[data-request="{request_id}"]')
                await routed.wait_for(timeout=ROUTED_WITHIN_S * 1000)
                await page.locator("#feed li[data-type=RequestRouted]").first.wait_for(timeout=ROUTED_WITHIN_S * 1000)
                seen_after = time.monotonic() - answered
                assert await routed.get_attribute("data-target") == "billing"
                cells = await routed.locator("td").all_text_contents()
                assert cells[2:5] == ["billing", "1.000", "billing"], cells

                # the conversation's session shows with its worker once cluster_state has folded it
                session = page.locator('#sessions tr[data-session="ui-session"]')
                await session.wait_for(timeout=5000)
                assert "billing" in await session.locator("td").all_text_contents()

                screenshot = tmp_path / "dashboard.png"
                await page.screenshot(path=str(screenshot), full_page=True)
                print(f"dashboard screenshot: {screenshot} (routed request shown {seen_after:.2f}s after its answer)")
                assert screenshot.stat().st_size > 10_000
            finally:
                await browser.close()
