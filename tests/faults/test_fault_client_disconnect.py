"""A client that goes away mid-stream (real processes, `nrt up`): the worker stops generating its
request within one decode step (its log says how many tokens ran after the cancel), and the request
is recorded as cancelled (``RequestFailed``, code ``client_disconnected``)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from fault_helpers import Streamed, nrt, stream
from stack_processes import tiny_manifest


def test_a_client_that_disconnects_cancels_its_generation_on_the_worker(start_stack, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    manifest = tmp_path / "tiny.yaml"
    manifest.write_text(tiny_manifest("faults-cancel"))
    stack = start_stack(manifest)
    out = Streamed()
    deadline = time.monotonic() + 120
    while True:  # the worker has loaded billing
        out = Streamed()
        stream(stack.url, "billing", 450, out, stop_after=5)
        if out.error is None:
            break
        assert out.error["code"] == "model_unavailable", out.error  # else: not a matter of waiting
        assert time.monotonic() < deadline, f"billing was not served in time: {out.error}"
        time.sleep(0.5)
    assert out.chunks == 5
    assert out.finish is None
    worker_log = stack.data_dir / "logs" / "specialist_worker.log"
    pattern = re.compile(rf"request {out.request_id} stopped after (\d+) tokens, (\d+) after its consumer left")
    found = None
    deadline = time.monotonic() + 10
    while found is None:
        found = pattern.search(worker_log.read_text())
        assert found or time.monotonic() < deadline, worker_log.read_text()[-3000:]
        time.sleep(0.1)
    generated, after_cancel = int(found.group(1)), int(found.group(2))
    print(f"\nthe worker stopped after {generated} of 450 tokens, {after_cancel} after the cancel")
    assert after_cancel <= 1  # within one decode step
    assert generated < 450

    deadline = time.monotonic() + 30
    while not (lines := nrt(stack, "events", "query", "--stream", f"request:{out.request_id}", "--json").splitlines()):
        assert time.monotonic() < deadline
        time.sleep(0.3)
    while len(lines) < 2:
        assert time.monotonic() < deadline, lines
        time.sleep(0.3)
        lines = nrt(stack, "events", "query", "--stream", f"request:{out.request_id}", "--json").splitlines()
    events = [json.loads(line)["event"] for line in lines]
    assert [e["type"] for e in events] == ["RequestAdmitted", "RequestFailed"], events
    assert (events[1]["code"], events[1]["status"]) == ("client_disconnected", 499), events[1]
