"""A bare onnxruntime greedy loop over a prepared causal-LM artifact.

This is the reference the catalogue checks its builds with (and a baseline to compare a
serving engine against): batch of one, KV cache carried between steps, argmax decoding.
It relies only on the record's tensor names, never on transformers.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import msgspec
import numpy as np
import numpy.typing as npt
import onnxruntime as ort

from nrt.adapters.catalogue.record import ArtifactRecord
from nrt.adapters.inference.artifact import LOGITS_TO_KEEP

Past = dict[str, npt.NDArray[np.floating]]


class GreedyResult(msgspec.Struct, frozen=True):
    prompt_ids: tuple[int, ...]
    token_ids: tuple[int, ...]  # generated tokens, the stop token included when one was hit
    prefill_seconds: float  # prompt forward pass, i.e. time to the first token
    decode_seconds: float  # every later step

    @property
    def decode_tokens_per_second(self) -> float:
        steps = len(self.token_ids) - 1
        return steps / self.decode_seconds if steps > 0 and self.decode_seconds > 0 else 0.0


def open_session(
    directory: Path, record: ArtifactRecord, providers: Sequence[str] | None = None
) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(
        str(directory / record.model), options, providers=list(providers or ["CPUExecutionProvider"])
    )


def empty_past(record: ArtifactRecord, batch_size: int = 1) -> Past:
    """Zero-length past key/values for a first (prefill) step."""
    _require_causal(record)
    assert record.num_kv_heads is not None
    assert record.head_dim is not None
    assert record.kv_dtype is not None
    shape = (batch_size, record.num_kv_heads, 0, record.head_dim)
    return {name: np.zeros(shape, dtype=np.dtype(record.kv_dtype)) for name in record.past_inputs}


def forward(
    session: ort.InferenceSession,
    record: ArtifactRecord,
    input_ids: npt.NDArray[np.int64],
    past: Past,
    attention_mask: npt.NDArray[np.int64] | None = None,
    *,
    logits_to_keep: int = 0,
) -> tuple[npt.NDArray[np.float32], Past]:
    """One step: logits ``[batch, new_tokens, vocab]`` and the grown past key/values.

    A graph with a ``logits_to_keep`` input (:mod:`nrt.adapters.catalogue.builders.logits`) returns the
    last ``logits_to_keep`` positions only (0: every position, as a graph without the input does)."""
    _require_causal(record)
    batch, new = input_ids.shape
    past_length = next(iter(past.values())).shape[2]
    if attention_mask is None:
        attention_mask = np.ones((batch, past_length + new), dtype=np.int64)
    feed: dict[str, npt.NDArray[np.generic]] = {"input_ids": input_ids, "attention_mask": attention_mask, **past}
    if record.position_ids_input is not None:
        positions = np.cumsum(attention_mask, axis=1) - 1
        feed[record.position_ids_input] = np.maximum(positions[:, -new:], 0).astype(np.int64)
    if any(i.name == LOGITS_TO_KEEP for i in session.get_inputs()):
        feed[LOGITS_TO_KEEP] = np.array(logits_to_keep, dtype=np.int64)
    assert record.logits_output is not None
    outputs = session.run([record.logits_output, *record.present_outputs], feed)
    logits = outputs[0]
    grown = dict(zip(record.past_inputs, outputs[1:], strict=True))
    return logits, grown


def greedy(
    session: ort.InferenceSession,
    record: ArtifactRecord,
    prompt_ids: Sequence[int],
    max_new_tokens: int,
    *,
    stop_at_eos: bool = True,
) -> GreedyResult:
    """Greedy decoding of up to ``max_new_tokens`` after ``prompt_ids``."""
    if not prompt_ids:
        raise ValueError("the prompt must hold at least one token")
    if len(prompt_ids) + max_new_tokens > record.context_length:
        raise ValueError(
            f"{len(prompt_ids)} + {max_new_tokens} tokens exceed the context length {record.context_length}"
        )
    started = time.perf_counter()
    logits, past = forward(
        session, record, np.array([list(prompt_ids)], dtype=np.int64), empty_past(record), logits_to_keep=1
    )
    token = int(np.argmax(logits[0, -1]))
    prefilled = time.perf_counter()
    generated = [token]
    while len(generated) < max_new_tokens and not (stop_at_eos and token in record.eos_token_ids):
        logits, past = forward(session, record, np.array([[token]], dtype=np.int64), past, logits_to_keep=1)
        token = int(np.argmax(logits[0, -1]))
        generated.append(token)
    finished = time.perf_counter()
    return GreedyResult(
        prompt_ids=tuple(prompt_ids),
        token_ids=tuple(generated),
        prefill_seconds=prefilled - started,
        decode_seconds=finished - prefilled,
    )


def _require_causal(record: ArtifactRecord) -> None:
    if record.kind != "causal-lm":
        raise ValueError(f"{record.name} is a {record.kind} model, not a causal LM")


def decode_speed(directory: Path, record: ArtifactRecord, tokens: int = 32, runs: int = 2) -> float:
    """This host's greedy decode speed of the artifact in ``directory`` (tokens/s, the best of ``runs``),
    after a short prompt, on the provider its record names when this host offers it, else the CPU."""
    _require_causal(record)
    session = open_session(directory, record)
    prompt = [record.bos_token_id if record.bos_token_id is not None else 1, 2, 3, 4]
    return max(
        greedy(session, record, prompt, tokens + 1, stop_at_eos=False).decode_tokens_per_second for _ in range(runs)
    )
