"""A causal LM over one ONNX Runtime session: tokenizer, spec, and the forward pass.

Two ways to run it:

- :class:`Stepper`, the serving path: IOBinding, with the key/value cache as ``OrtValue`` s
  on the session's device (see :mod:`nrt.adapters.inference.kv_tensors`). The host binds token ids,
  mask and positions; ``present`` outputs stay where ORT wrote them and become the next
  step's ``past``; only logits (or greedy ids) come back. On the CPU provider this is also
  the fastest loop: a step's presents are never wrapped as numpy arrays (re-measured with
  ORT 1.31 on tiny-llama and Gemma 3 270M: not slower than ``session.run`` with numpy).
- :meth:`CausalLM.forward`, ``session.run`` with numpy arrays: classification, the
  padding probes below and tests, where the cache's host copy is what the caller wants.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import onnxruntime as ort
from tokenizers import Tokenizer

from nrt.adapters.inference.artifact import (
    LOGITS_TO_KEEP,
    TOKENIZER_FILE,
    CausalSpec,
    GraphSignature,
    causal_spec,
    read_record,
    read_signature,
    require_file,
)
from nrt.adapters.inference.errors import ArtifactError
from nrt.adapters.inference.kv_tensors import KV, DeviceOps, OrtValue
from nrt.adapters.inference.weights import active_provider, build_session, load_weights

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float32]

_PADDINGS = (1, 2, 3, 4, 8, 16)  # 4, 8 and 16: whole SIMD groups of float32 (SSE, AVX, AVX-512)
_EXACT = 1e-3  # relative logit difference below which two decode steps count as the same
_LAST = np.array(1, dtype=np.int64)  # logits_to_keep: the last position only
_ALL = np.array(0, dtype=np.int64)  # logits_to_keep: every position


class CausalLM:
    """One loaded causal LM: session, graph signature, spec and tokenizer."""

    def __init__(
        self,
        session: ort.InferenceSession,
        artifact_dir: Path | str,
        tokenizer: Tokenizer | None = None,
        *,
        helper_graphs: bool = False,
    ) -> None:
        """``helper_graphs``: read logits through the device path's helper graphs even on the
        CPU provider (tests exercise the CUDA path's logic without a GPU)."""
        self.artifact_dir = Path(artifact_dir)
        self.session = session
        self.signature: GraphSignature = read_signature(session)
        self.spec: CausalSpec = causal_spec(self.artifact_dir, self.signature)
        self.tokenizer = tokenizer or Tokenizer.from_file(str(require_file(self.artifact_dir, TOKENIZER_FILE)))
        # the ids the tokenizer knows, added tokens included: read once, with the model, since ``get_vocab_size``
        # builds the whole vocabulary each call (191 ms for Gemma 3's 262,144 tokens, on a request's event loop)
        self.tokenizer_vocab_size = int(self.tokenizer.get_vocab_size(with_added_tokens=True))
        self.provider = active_provider(session)
        self.ids_dtype = np.dtype(self.signature.ids_dtype)
        if self.signature.kv_dtype == "bfloat16":
            raise ArtifactError(
                f"{self.artifact_dir}: bfloat16 key/values are not supported on this runtime; "
                "export the model in float32, float16 or int8-quantized float32"
            )
        self.kv_dtype = np.dtype(self.signature.kv_dtype)
        self._output_names = ["logits", *self.signature.present_names]
        self.eos_ids = frozenset(self.spec.eos_token_ids)
        self._prepend_bos = read_record(self.artifact_dir).tokenizer_adds_special_tokens is False
        self._helper_graphs = helper_graphs
        self._probed: dict[bool, dict[int, float]] = {}  # right_padded -> padding -> error

    @classmethod
    def load(cls, artifact_dir: Path | str, providers: Sequence[str] | None = None) -> CausalLM:
        """Load weights and build a session in one go (tests, benchmarks, scripts)."""
        return cls(build_session(load_weights(artifact_dir), providers), artifact_dir)

    @functools.cached_property
    def ops(self) -> DeviceOps:
        """Cache operations on the session's device (helper graphs built on first use)."""
        return DeviceOps(
            self.session,
            tensors=len(self.signature.past_names),
            heads=self.spec.num_kv_heads,
            head_dim=self.spec.head_dim,
            kv_dtype=self.kv_dtype,
            logits_dtype=np.dtype(self.signature.logits_dtype),
            helpers=self._helper_graphs,
        )

    def stepper(self) -> Stepper:
        """A forward pass with its own IOBinding, for one thread (the scheduler's)."""
        return Stepper(self)

    @functools.cached_property
    def special_ids(self) -> frozenset[int]:
        """Ids of the tokenizer's special tokens (skipped when decoding)."""
        return frozenset(i for i, token in self.tokenizer.get_added_tokens_decoder().items() if token.special)

    @functools.cached_property
    def right_padded(self) -> bool:
        """Whether a batch's rows are padded on the right (valid keys from column 0): a fused graph's
        GroupQueryAttention reads each row's keys up to the mask's sum. Measured, as
        :attr:`can_batch` is: a graph that hides left padding is padded on the left."""
        return not self._batches(right=False) and self._batches(right=True)

    @functools.cached_property
    def extends_rows_together(self) -> bool:
        """Whether one run can add several tokens to each of several rows' caches (the router scoring its
        labels side by side): not a fused graph, whose CPU ``GroupQueryAttention`` takes a single row when
        it adds more than one token to a cache ("batch_size must be 1 when sequence_length > 1")."""
        return self.batch_exact and not self.right_padded

    @functools.cached_property
    def padding_errors(self) -> dict[int, float]:
        """:meth:`left_padding_error` (or its right-padded twin) for the paddings that kernels'
        SIMD widths make distinct, on the side the batch pads."""
        return self._padding_errors(self.right_padded)

    @functools.cached_property
    def can_batch(self) -> bool:
        """Whether rows of different lengths can share a padded batch.

        Measured, not assumed, with one decode step over a cache alone and over the same
        cache with columns padded on the left (on the right for a graph of
        :attr:`right_padded`) and masked out. Two things must hold:

        - the padding is hidden: what the padded columns hold changes nothing at all
          (the graph honours the attention mask);
        - positions are the ones we feed (``position_ids``) or derive from the mask, not
          from the cache length: some padding reproduces the unpadded step. A graph that
          counts positions from the cache length fails at every padding, and is served one
          request at a time instead.

        Kernels accumulate in SIMD groups, so a padding that is not a multiple of the
        group changes the order of float sums. On a float model that shows in the last
        bits only; with int8 activations (MatMulNBits ``accuracy_level=4``) a last-bit
        difference can move an activation to the next quantisation step, and the logits
        of a row in a batch agree with its logits alone to that quantisation noise (about
        2% of the logit scale on Gemma 3 270M int8), not bit for bit. Such a model still
        batches; :attr:`batch_exact` says which kind this is.
        """
        return self._batches(self.right_padded)

    @functools.cached_property
    def batch_exact(self) -> bool:
        """Whether a batched row computes bit-for-bit-close logits to the same row alone, at any padding."""
        return self.can_batch and max(self.padding_errors.values()) <= _EXACT

    def _batches(self, right: bool) -> bool:
        return self.padding_hidden(right=right) and min(self._padding_errors(right).values()) <= _EXACT

    def _padding_errors(self, right: bool) -> dict[int, float]:
        errors = self._probed.get(right)
        if errors is None:
            errors = self._probed[right] = {pad: self.left_padding_error(pad, right=right) for pad in _PADDINGS}
        return errors

    def padding_hidden(self, pad: int = 3, *, right: bool = False) -> bool:
        """Whether the values in masked-out padding columns leave a decode step unchanged."""
        zeros = self._padded_step(pad, np.zeros, right)
        noise = self._padded_step(pad, lambda shape, dtype: np.full(shape, 7.0, dtype=dtype), right)
        return bool(np.array_equal(zeros, noise))

    def left_padding_error(self, pad: int = 3, *, right: bool = False) -> float:
        """Max |logit difference| of one decode step with vs without ``pad`` left padding (right
        padding with ``right``), relative to the logits' scale."""
        plain = self._padded_step(0, np.zeros, right)
        padded = self._padded_step(pad, np.zeros, right)
        scale = 1.0 + float(np.abs(plain).max())
        return float(np.abs(plain.astype(np.float64) - padded).max()) / scale

    def _padded_step(
        self, pad: int, fill: Callable[[tuple[int, ...], np.dtype[Any]], np.ndarray], right: bool = False
    ) -> FloatArray:
        """The logits of one decode step after a fixed 6-token prompt, its cache padded by ``pad``
        columns of ``fill`` on the left (on the right with ``right``)."""
        vocab = self.spec.vocab_size
        prompt = np.array([[(17 * i + 5) % vocab for i in range(6)]], dtype=np.int64)
        n = prompt.shape[1]
        _, past = self.forward(prompt, np.ones((1, n), np.int64), np.arange(n)[None, :], self.empty_past())
        step = np.array([[(31 * n) % vocab]], dtype=np.int64)
        padding = [fill((*a.shape[:2], pad, a.shape[3]), a.dtype) for a in past]
        parts = [(p, a) if not right else (a, p) for a, p in zip(past, padding, strict=True)]
        padded_past = [np.concatenate(pair, axis=2) for pair in parts]
        ones, zeros = np.ones((1, n + 1), np.int64), np.zeros((1, pad), np.int64)
        mask = np.concatenate([ones, zeros] if right else [zeros, ones], axis=1)
        logits, _ = self.forward(step, mask, np.array([[n]]), padded_past)
        return logits

    def encode(self, text: str, *, add_special_tokens: bool = True) -> list[int]:
        """Token ids of a prompt; with ``add_special_tokens``, starting with BOS when the
        model has one and its tokenizer does not add it (per ``nrt-artifact.json``)."""
        ids: list[int] = self.tokenizer.encode(text, add_special_tokens=add_special_tokens).ids
        bos = self.spec.bos_token_id
        if add_special_tokens and self._prepend_bos and bos is not None and (not ids or ids[0] != bos):
            ids.insert(0, bos)
        return ids

    def decode(self, ids: Sequence[int]) -> str:
        text: str = self.tokenizer.decode(list(ids), skip_special_tokens=True)
        return text

    def empty_past(self, batch: int = 1) -> list[np.ndarray]:
        """An empty cache as host arrays, for :meth:`forward` (the serving path's is ``ops.empty_past``)."""
        shape = (batch, self.spec.num_kv_heads, 0, self.spec.head_dim)
        empty = np.zeros(shape, dtype=self.kv_dtype)
        return [empty for _ in self.signature.past_names]

    def forward(
        self,
        input_ids: IntArray,
        attention_mask: IntArray,
        position_ids: IntArray,
        past: Sequence[np.ndarray],
    ) -> tuple[FloatArray, list[np.ndarray]]:
        """One ONNX run. Returns the logits of each row's last position ``[B, vocab]``
        and the ``present`` key/values (``[B, heads, past + new, head_dim]`` each)."""
        logits, presents = self._run(input_ids, attention_mask, position_ids, past, _LAST)
        return np.ascontiguousarray(logits[:, -1, :]), presents

    def forward_sequence(
        self,
        input_ids: IntArray,
        attention_mask: IntArray,
        position_ids: IntArray,
        past: Sequence[np.ndarray],
    ) -> tuple[FloatArray, list[np.ndarray]]:
        """:meth:`forward` with the logits of every new position ``[B, new, vocab]``."""
        return self._run(input_ids, attention_mask, position_ids, past, _ALL)

    def _run(
        self,
        input_ids: IntArray,
        attention_mask: IntArray,
        position_ids: IntArray,
        past: Sequence[np.ndarray],
        logits_to_keep: IntArray,
    ) -> tuple[FloatArray, list[np.ndarray]]:
        ids_dtype = self.ids_dtype
        feed: dict[str, np.ndarray] = {
            "input_ids": input_ids.astype(ids_dtype, copy=False),
            "attention_mask": attention_mask.astype(ids_dtype, copy=False),
        }
        if self.signature.has_position_ids:
            feed["position_ids"] = position_ids.astype(ids_dtype, copy=False)
        if self.signature.has_use_cache_branch:
            feed["use_cache_branch"] = np.array([attention_mask.shape[1] > input_ids.shape[1]])
        if self.signature.has_logits_to_keep:
            feed[LOGITS_TO_KEEP] = logits_to_keep
        feed.update(zip(self.signature.past_names, past, strict=True))
        logits, *presents = self.session.run(self._output_names, feed)
        return logits, presents


class Stepper:
    """The serving forward pass: one reusable IOBinding, the cache on the session's device.

    Not thread-safe (the binding is state): one per scheduler thread.
    """

    def __init__(self, model: CausalLM) -> None:
        self.model = model
        self.binding = model.ops.binding(model.session)
        self._outputs = ("logits", *model.signature.present_names)
        self._past_names = model.signature.past_names
        self._positions = model.signature.has_position_ids
        self._cache_branch = model.signature.has_use_cache_branch
        self._keep_last = model.signature.has_logits_to_keep
        self._ids_dtype = model.ids_dtype
        self._logits_dtype = np.dtype(model.signature.logits_dtype)
        self._vocab = model.spec.vocab_size
        self._logits: OrtValue | None = None  # [B, 1, vocab], reused while the batch size stays

    def run(
        self,
        input_ids: IntArray,
        attention_mask: IntArray,
        position_ids: IntArray,
        past: Sequence[OrtValue],
    ) -> tuple[OrtValue, KV]:
        """One run: the logits ``[B, new, vocab]`` (``[B, 1, vocab]``, the last position only,
        when the graph takes ``logits_to_keep``) and the presents (the next step's past), both
        left on the device. Nothing stays bound afterwards, so dropping a returned
        tensor frees it.

        Logits of one position per row go to a buffer allocated once per batch size and reused
        by the next run of that size: read them before running again."""
        dtype = self._ids_dtype
        host = [
            ("input_ids", np.ascontiguousarray(input_ids, dtype=dtype)),
            ("attention_mask", np.ascontiguousarray(attention_mask, dtype=dtype)),
        ]
        if self._positions:
            host.append(("position_ids", np.ascontiguousarray(position_ids, dtype=dtype)))
        if self._cache_branch:
            host.append(("use_cache_branch", np.array([attention_mask.shape[1] > input_ids.shape[1]])))
        if self._keep_last:
            host.append((LOGITS_TO_KEEP, _LAST))
        into: list[tuple[str, OrtValue]] = []
        outputs = self._outputs
        if self._keep_last or input_ids.shape[1] == 1:
            into.append(("logits", self._logits_buffer(int(input_ids.shape[0]))))
            outputs = outputs[1:]
        logits, *presents = self.binding.step(host, zip(self._past_names, past, strict=True), into, outputs)
        return logits, presents

    def _logits_buffer(self, batch: int) -> OrtValue:
        buffer = self._logits
        if buffer is None or buffer.shape()[0] != batch:
            buffer = self._logits = self.model.ops.allocate([batch, 1, self._vocab], self._logits_dtype)
        return buffer
