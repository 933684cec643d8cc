"""What a user could run instead of the worker, on the same model, measured the same way.

- :class:`GenaiPeer`: onnxruntime-genai on the very same ``model.onnx``. Our artifacts are
  optimum-layout decoders (``input_ids``, ``attention_mask``, ``position_ids``,
  ``past_key_values.{i}.key/value`` -> ``logits``, ``present.{i}.key/value``), which genai
  drives when told so by a ``genai_config.json``: :func:`genai_config` writes one from the
  artifact's record and ``config.json`` into a directory beside a link to the graph. Tokens
  go in as ids (ours), so every runner decodes the same prompt. genai feeds only the inputs
  its config names: where the graph takes ``logits_to_keep`` (the LM head projects only the
  last position), genai gets a copy of the graph with that input fixed at 0 (every
  position, as the graph computed before that rewrite): genai allocates the prefill's logits
  for every prompt position itself and refuses a graph that returns fewer.
- :class:`LlamaCppPeer`: llama.cpp (llama-cpp-python) on the GGUF the Gemma artifact was
  converted from, CPU only. One ``Llama`` holds one context and serves one sequence at a
  time, so its aggregate is what a user gets from requests served one after another.

Figures, for every runner: time to first token (request start to the first generated
token: the prefill), decode tokens/s (tokens after the first over the time after the
first), aggregate tokens/s (every generated token over the wall time of a group of
requests started together).
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import msgspec
import numpy as np

from nrt.adapters.catalogue import MODEL_FILE, load_record
from nrt.adapters.catalogue.signature import read_signature
from nrt.adapters.inference.artifact import LOGITS_TO_KEEP, read_hf_config

_P = ParamSpec("_P")
_T = TypeVar("_T")
# Every call into a peer from async code runs on this one thread (on_peer_thread)
_PEER_THREAD = ThreadPoolExecutor(max_workers=1, thread_name_prefix="bench-peer")


async def on_peer_thread(call: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
    """``call`` on the one thread every peer call runs on. llama.cpp's OpenMP team belongs to the thread that
    runs it: called from ``asyncio.to_thread``'s changing threads it grows a second team whose threads
    spin-wait beside the first's, and decoded at about 26 tokens/s instead of 42 here (its figure in
    ``bench.worker`` then fell to that in some runs, and the ratios against it rose)."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_PEER_THREAD, functools.partial(call, *args, **kwargs))


GENAI_CONFIG = "genai_config.json"


class Figures(msgspec.Struct, frozen=True):
    """One single-stream run: time to first token and decode speed."""

    ttft_ms: float
    decode_tokens_per_s: float
    tokens: tuple[int, ...]


def best(runs: Sequence[Figures]) -> Figures:
    """The best time to first token and the best decode speed over several runs (noise only slows)."""
    return Figures(
        ttft_ms=min(run.ttft_ms for run in runs),
        decode_tokens_per_s=max(run.decode_tokens_per_s for run in runs),
        tokens=runs[0].tokens,
    )


def _figures(started: float, stamps: list[float], tokens: list[int]) -> Figures:
    decode = (len(stamps) - 1) / (stamps[-1] - stamps[0]) if len(stamps) > 1 and stamps[-1] > stamps[0] else 0.0
    return Figures(ttft_ms=(stamps[0] - started) * 1e3, decode_tokens_per_s=decode, tokens=tuple(tokens))


def genai_available() -> str | None:
    """None when onnxruntime-genai imports, else why not."""
    try:
        import onnxruntime_genai  # noqa: F401
    except ImportError as exc:
        return f"onnxruntime-genai is not installed ({exc}; NRT_EXTRAS=dev,export,bench scripts/bootstrap)"
    return None


def genai_config(artifact: Path, *, cuda: bool = False) -> dict[str, Any]:
    """A ``genai_config.json`` for the optimum-layout decoder in ``artifact`` (its record and config.json)."""
    record = load_record(artifact)
    config = read_hf_config(artifact)
    if record.kind != "causal-lm" or record.num_layers is None or record.head_dim is None:
        raise ValueError(f"{artifact} is not a causal LM artifact")
    inputs = {
        "input_ids": "input_ids",
        "attention_mask": "attention_mask",
        "past_key_names": "past_key_values.%d.key",
        "past_value_names": "past_key_values.%d.value",
    }
    if record.position_ids_input is not None:
        inputs["position_ids"] = record.position_ids_input
    heads = config.num_attention_heads or record.num_kv_heads
    return {
        "model": {
            "type": config.model_type or "llama",
            "bos_token_id": record.bos_token_id,
            "eos_token_id": list(record.eos_token_ids),
            "pad_token_id": record.pad_token_id if record.pad_token_id is not None else record.eos_token_ids[0],
            "context_length": record.context_length,
            "vocab_size": record.vocab_size,
            "decoder": {
                "filename": MODEL_FILE,
                "session_options": {
                    "log_id": "onnxruntime-genai",
                    "provider_options": [{"cuda": {}}] if cuda else [],
                },
                "head_size": record.head_dim,
                "hidden_size": config.hidden_size or record.head_dim * (heads or 1),
                "num_attention_heads": heads,
                "num_key_value_heads": record.num_kv_heads,
                "num_hidden_layers": record.num_layers,
                "inputs": inputs,
                "outputs": {
                    "logits": record.logits_output,
                    "present_key_names": "present.%d.key",
                    "present_value_names": "present.%d.value",
                },
            },
        },
        # past and present in separate buffers: the graph concatenates past and new key/values itself
        "search": {"do_sample": False, "num_beams": 1, "max_length": record.context_length},
    }


def fix_input(source: Path, target: Path, name: str, value: np.ndarray) -> None:
    """Copy the graph at ``source`` to ``target`` with input ``name`` made a constant ``value``."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(source))
    graph = model.graph
    (fixed,) = [i for i in graph.input if i.name == name]
    graph.input.remove(fixed)
    graph.initializer.append(numpy_helper.from_array(value, name))
    onnx.save(model, str(target))


@contextmanager
def genai_model_dir(artifact: Path, *, cuda: bool = False) -> Iterator[Path]:
    """A temporary directory genai can open: a link to the artifact's graph and a genai_config.json."""
    with tempfile.TemporaryDirectory(prefix="nrt-genai-") as tmp:
        directory = Path(tmp)
        graph = (artifact / MODEL_FILE).resolve()
        if LOGITS_TO_KEEP in {i.name for i in read_signature(graph).inputs}:
            fix_input(graph, directory / MODEL_FILE, LOGITS_TO_KEEP, np.array(0, dtype=np.int64))
        else:
            os.symlink(graph, directory / MODEL_FILE)
        (directory / GENAI_CONFIG).write_text(json.dumps(genai_config(artifact, cuda=cuda), indent=2))
        yield directory


class GenaiPeer:
    """onnxruntime-genai's greedy generator over a model directory from :func:`genai_model_dir`."""

    def __init__(self, directory: Path) -> None:
        import onnxruntime_genai as og

        self._og = og
        self.model = og.Model(str(directory))

    def _generator(self, ids: Sequence[int], n: int, batch: int = 1) -> Any:
        params = self._og.GeneratorParams(self.model)
        params.set_search_options(max_length=len(ids) + n, do_sample=False, batch_size=batch)
        generator = self._og.Generator(self.model, params)
        generator.append_tokens(np.array([list(ids)] * batch, dtype=np.int32))  # the prefill
        return generator

    def single(self, ids: Sequence[int], n: int) -> Figures:
        """One request of ``n`` greedy tokens."""
        started = time.perf_counter()
        generator = self._generator(ids, n)
        stamps: list[float] = []
        tokens: list[int] = []
        while not generator.is_done() and len(tokens) < n:
            generator.generate_next_token()
            tokens.append(int(generator.get_next_tokens()[0]))
            stamps.append(time.perf_counter())
        return _figures(started, stamps, tokens)

    def aggregate(self, ids: Sequence[int], n: int, batch: int) -> float:
        """Tokens/s of ``batch`` copies of one request generated as one static batch (genai's batching)."""
        started = time.perf_counter()
        generator = self._generator(ids, n, batch)
        steps = 0
        while not generator.is_done() and steps < n:
            generator.generate_next_token()
            steps += 1
        return batch * steps / (time.perf_counter() - started)


def llama_cpp_available() -> str | None:
    """None when llama-cpp-python imports, else why not."""
    try:
        import llama_cpp  # noqa: F401
    except ImportError as exc:
        return f"llama-cpp-python is not installed ({exc}; NRT_EXTRAS=dev,export,bench scripts/bootstrap, it compiles llama.cpp)"
    return None


class LlamaCppPeer:
    """llama.cpp on a GGUF, one context (one sequence at a time), CPU threads = this host's cores."""

    def __init__(self, gguf: Path, n_ctx: int = 1024) -> None:
        from llama_cpp import Llama

        # Any: llama-cpp-python's annotations are partial, and CI type-checks without it installed
        self.llm: Any = Llama(model_path=str(gguf), n_ctx=n_ctx, n_threads=os.cpu_count() or 1, verbose=False)

    def single(self, ids: Sequence[int], n: int) -> Figures:
        """One request of ``n`` greedy tokens from a cleared context (no prefix reuse between requests:
        llama-cpp-python would otherwise skip the prefill of a prompt it has just seen)."""
        self.llm.reset()
        started = time.perf_counter()
        stamps: list[float] = []
        tokens: list[int] = []
        for token in self.llm.generate(list(ids), top_k=1, top_p=1.0, temp=0.0, repeat_penalty=1.0, reset=True):
            tokens.append(int(token))
            stamps.append(time.perf_counter())
            if len(tokens) >= n:
                break
        return _figures(started, stamps, tokens)

    def aggregate(self, ids: Sequence[int], n: int, requests: int) -> float:
        """Tokens/s of ``requests`` requests arriving together, served one after another on the one context."""
        started = time.perf_counter()
        count = sum(len(self.single(ids, n).tokens) for _ in range(requests))
        return count / (time.perf_counter() - started)
