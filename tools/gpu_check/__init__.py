"""The GPU check (issue 30): prepared here, run on a lent CUDA machine, its results in one file.

The lent GPU machines reach no network, and each call to one carries at most 64 MiB (the working tree
included). ONNX Runtime's CUDA build alone is a 244 MiB wheel, so ``prepare`` (here, with PyPI) builds
what the machine lacks and packs it into parts that each fit one call, and the machine assembles them:

    scripts/gpu-check prepare [--dir .gpu-check] [--sm 90]
        Here. Downloads onnxruntime-gpu (pinned to the project's onnxruntime) and the Python packages
        the machine's python3 (3.12, with torch, numpy, onnx and CUDA 13 + cuDNN 9 as nvidia-* wheels)
        lacks, installs them into one site dir for CPython 3.12, keeps only the GPU code for the
        machine's architecture in the CUDA provider (``--sm 90``: H100 and H200; the kernels of other
        architectures are zeroed, which compression then drops), prepares tiny-llama with its ``cuda``
        variant (fp16 weights; no GPU needed) and the tests' tiny models, and packs it all (tar.xz) into
        ``DIR/part-N`` folders each under the carry limit. It prints the calls that carry them.
    scripts/gpu-check receive [--dir .gpu-check]
        On the machine, in each call but the last: keeps the part carried into /tmp/nrt-gpu-check, where
        the next call (on the same warm machine: it waits 30 s) finds it.
    scripts/gpu-check run [--dir .gpu-check] [--results FILE] [--python PY] [--dry-run]
        On the machine, in the last call: assembles the parts (checksums), then the stages, each with a
        timeout and all within TOTAL_S (under 8 minutes): the device and versions, the tests marked
        ``gpu``, the resident's device bytes against NVML's own reading, the worker benchmark on
        tiny-llama's cuda variant (``bench.worker``: decode and time to first token against a bare ONNX
        Runtime CUDA loop) and llama.cpp's CUDA build where it is installed. Writes FILE (default
        ``gpu-check.json``; ``$OUT/gpu-check.json`` on a lent machine brings it back) and exits 0 when
        every stage passed and every target was met. ``--python`` runs with an interpreter that already
        has the GPU build (a CUDA host with network: ``NRT_GPU=1 scripts/bootstrap``), without parts.
        ``--dry-run`` says what would run, and whether a GPU is here, and runs nothing.

Targets: decode >= 0.9x the bare ONNX Runtime CUDA loop; a resident's measured device bytes within
10% of NVML's reading. Its modules import only the standard library at the top: ``run`` starts under
the machine's own python3, before the parts are unpacked.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from tools.gpu_check.bundle import DEFAULT_SM, prepare
from tools.gpu_check.common import ARCHIVE, DEFAULT_DIR, MANIFEST, MIB, ROOT, STAGING
from tools.gpu_check.fatbin import FATBIN_MAGIC, PruneReport, elf_section, prune_fatbin
from tools.gpu_check.machine import receive, run
from tools.gpu_check.parts import Chunk, Manifest, carry_plan, find_chunks, part_sizes, split_archive, unpack
from tools.gpu_check.probes import resident_bytes, versions
from tools.gpu_check.results import (
    Check,
    Results,
    TestSummary,
    bench_checks,
    bytes_check,
    decode_check,
    junit_summary,
    summary_lines,
    ttft_check,
    verdict,
    write_results,
)
from tools.gpu_check.stages import TOTAL_S, Deadline, StageResult, run_stage

__all__ = [
    "ARCHIVE",
    "DEFAULT_DIR",
    "FATBIN_MAGIC",
    "MANIFEST",
    "STAGING",
    "Check",
    "Chunk",
    "Deadline",
    "Manifest",
    "PruneReport",
    "Results",
    "StageResult",
    "TestSummary",
    "bench_checks",
    "bytes_check",
    "carry_plan",
    "decode_check",
    "elf_section",
    "find_chunks",
    "junit_summary",
    "main",
    "parser",
    "part_sizes",
    "prepare",
    "prune_fatbin",
    "receive",
    "resident_bytes",
    "run",
    "run_stage",
    "split_archive",
    "summary_lines",
    "ttft_check",
    "unpack",
    "verdict",
    "versions",
    "write_results",
]


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="scripts/gpu-check", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)
    prep = commands.add_parser("prepare", help="here, with PyPI: build the parts a lent GPU machine needs")
    prep.add_argument("--dir", type=Path, default=ROOT / DEFAULT_DIR)
    prep.add_argument("--sm", type=int, default=DEFAULT_SM, help="the GPU architecture kept (90: H100, H200; 0: all)")
    prep.add_argument("--part-mib", type=float, default=None, help="a part's size (default: what a call carries)")
    prep.add_argument("--skip-download", action="store_true", help="reuse DIR/build/wheels")
    rec = commands.add_parser("receive", help="on the machine, each call but the last: keep the part carried")
    rec.add_argument("--dir", type=Path, default=ROOT / DEFAULT_DIR)
    go = commands.add_parser("run", help="on the machine, the last call: assemble, run, write the results file")
    go.add_argument("--dir", type=Path, default=ROOT / DEFAULT_DIR)
    go.add_argument("--results", type=Path, default=Path("gpu-check.json"))
    go.add_argument("--python", default=None, help="an interpreter with the GPU build already (no parts)")
    go.add_argument("--dry-run", action="store_true", help="say what would run and whether a GPU is here")
    go.add_argument("--total-s", type=float, default=TOTAL_S, help=argparse.SUPPRESS)
    for name in ("versions", "resident-bytes"):
        probe = commands.add_parser(name, help=argparse.SUPPRESS)
        probe.add_argument("--json", type=Path, required=True)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.command == "prepare":
        budget = int(args.part_mib * MIB) if args.part_mib else None
        return prepare(args.dir, args.sm, budget, args.skip_download)
    if args.command == "receive":
        return receive(args.dir)
    if args.command == "run":
        return run(args.dir, args.results, args.python, args.dry_run, args.total_s)
    if args.command == "versions":
        return versions(args.json)
    return resident_bytes(args.json)
