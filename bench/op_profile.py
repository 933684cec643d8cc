"""Where a decode step goes: ONNX Runtime's profiler over a prepared model's greedy loop, per op type.

The artifact's graph runs the bare greedy loop (``bare_greedy``: a prompt, then ``--tokens`` decode
steps) in a session with ``enable_profiling``; the profile's kernel times are summed per op type
over the decode steps (the prompt's run left out) and divided by their number. The matrices
(``MatMulNBits``, ``MatMul``) are also listed one by one under their node names' role
(``qkv_proj``, ``lm_head``, ...).

    python -m bench.op_profile [--model gemma3-270m] [--tokens 64]
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import onnxruntime as ort

from bench.models import PROMPT
from nrt.adapters.catalogue import ROOT_PROVIDER, prepare
from nrt.adapters.inference import CausalLM, bare_greedy

_ROLE = re.compile(r"/(\w+)/MatMul")
MATRICES = ("MatMulNBits", "MatMul")


def profile(model_path: Path, ids: list[int], tokens: int) -> list[dict[str, Any]]:
    """The profiler's events of one greedy run of ``tokens`` steps after ``ids``."""
    options = ort.SessionOptions()
    options.enable_profiling = True
    with tempfile.TemporaryDirectory() as scratch:
        options.profile_file_prefix = str(Path(scratch) / "profile")
        session = ort.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])
        bare_greedy(session, ids, tokens)
        events: list[dict[str, Any]] = json.loads(Path(session.end_profiling()).read_text())
    return events


def per_token(events: list[dict[str, Any]]) -> tuple[dict[str, float], dict[str, float], Counter[str], float]:
    """Per op type and per matrix role: kernel milliseconds per decode step; nodes per op type; the
    decode steps' mean wall time (``model_run``) in milliseconds."""
    runs = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e.get("name") == "model_run")
    decode = runs[1:]  # the first run is the prompt's
    if not decode:
        raise SystemExit("no decode step was profiled (--tokens must be at least 2)")
    start = decode[0][0]
    by_op: dict[str, float] = defaultdict(float)
    by_role: dict[str, float] = defaultdict(float)
    nodes: dict[str, set[str]] = defaultdict(set)
    for event in events:
        args = event.get("args") or {}
        if event.get("cat") != "Node" or "op_name" not in args or event["ts"] < start:
            continue
        if not event["name"].endswith("_kernel_time"):
            continue
        op, name = args["op_name"], event["name"].removesuffix("_kernel_time")
        by_op[op] += event["dur"] / 1000.0
        nodes[op].add(name)
        if op in MATRICES:
            match = _ROLE.search(name)
            by_role[match.group(1) if match else "other"] += event["dur"] / 1000.0
    steps = len(decode)
    wall = sum(end - begin for begin, end in decode) / 1000.0 / steps
    counts = Counter({op: len(names) for op, names in nodes.items()})
    return (
        {op: ms / steps for op, ms in by_op.items()},
        {role: ms / steps for role, ms in by_role.items()},
        counts,
        wall,
    )


def main(model: str, tokens: int) -> None:
    artifact = prepare(model, providers=(ROOT_PROVIDER,))
    causal = CausalLM.load(artifact.directory)
    by_op, by_role, counts, wall = per_token(profile(artifact.model_path, causal.encode(PROMPT), tokens))
    total = sum(by_op.values())
    print(f"{model} ({artifact.record.quantization_detail}), {tokens - 1} decode steps")
    print(f"model_run: {wall:.2f} ms per decode step; kernels {total:.2f} ms")
    print(f"{'op type':34s} {'ms/token':>9s} {'share':>7s} {'nodes':>6s}")
    for op, ms in sorted(by_op.items(), key=lambda item: -item[1]):
        print(f"{op:34s} {ms:9.2f} {ms / total:7.1%} {counts[op]:6d}")
    print(
        "matrices by role: "
        + ", ".join(f"{role} {ms:.2f} ms" for role, ms in sorted(by_role.items(), key=lambda i: -i[1]))
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="gemma3-270m")
    parser.add_argument("--tokens", type=int, default=64)
    arguments = parser.parse_args()
    main(arguments.model, arguments.tokens)
