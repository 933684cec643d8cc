"""A causal LM over one ONNX Runtime session: tokenizer, spec, and a single forward call.

Key/value tensors are plain numpy arrays: ONNX Runtime reads C-contiguous inputs in place,
and on the tiny and small models we serve, ``session.run`` with numpy measured faster per
step than the ``OrtValue`` APIs (whose Python wrappers cost more than the output copy saves).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnxruntime as ort
from tokenizers import Tokenizer

from nrt.inference.artifact import (
    TOKENIZER_FILE,
    CausalSpec,
    GraphSignature,
    causal_spec,
    read_record,
    read_signature,
    require_file,
)
from nrt.inference.errors import ArtifactError
from nrt.inference.weights import active_provider, build_session, load_weights

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float32]


class CausalLM:
    """One loaded causal LM: session, graph signature, spec and tokenizer."""

    def __init__(
        self,
        session: ort.InferenceSession,
        artifact_dir: Path | str,
        tokenizer: Tokenizer | None = None,
    ) -> None:
        self.artifact_dir = Path(artifact_dir)
        self.session = session
        self.signature: GraphSignature = read_signature(session)
        self.spec: CausalSpec = causal_spec(self.artifact_dir, self.signature)
        self.tokenizer = tokenizer or Tokenizer.from_file(str(require_file(self.artifact_dir, TOKENIZER_FILE)))
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

    @classmethod
    def load(cls, artifact_dir: Path | str, providers: Sequence[str] | None = None) -> CausalLM:
        """Load weights and build a session in one go (tests, benchmarks, scripts)."""
        return cls(build_session(load_weights(artifact_dir), providers), artifact_dir)

    @functools.cached_property
    def can_batch(self) -> bool:
        """Whether rows of different lengths can share a left-padded batch exactly.

        Measured, not assumed: decode one step over a cache alone, then over the same cache
        with zero columns padded on the left and masked out. They agree when the graph
        honours the attention mask and the positions we feed (``position_ids``) or derives
        positions from the mask (optimum's Gemma 3 export has no ``position_ids`` input).
        A graph that derives positions from the cache length fails, and is served one
        request at a time instead.
        """
        return self.left_padding_error() <= 1e-3

    def left_padding_error(self, pad: int = 3) -> float:
        """Max |logit difference| of one decode step with vs without ``pad`` left padding,
        relative to the logits' scale."""
        vocab = self.spec.vocab_size
        prompt = np.array([[(17 * i + 5) % vocab for i in range(6)]], dtype=np.int64)
        n = prompt.shape[1]
        _, past = self.forward(prompt, np.ones((1, n), np.int64), np.arange(n)[None, :], self.empty_past())
        step = np.array([[(31 * n) % vocab]], dtype=np.int64)
        plain, _ = self.forward(step, np.ones((1, n + 1), np.int64), np.array([[n]]), past)
        padded_past = [
            np.concatenate([np.zeros((*a.shape[:2], pad, a.shape[3]), dtype=a.dtype), a], axis=2) for a in past
        ]
        mask = np.concatenate([np.zeros((1, pad), np.int64), np.ones((1, n + 1), np.int64)], axis=1)
        padded, _ = self.forward(step, mask, np.array([[n]]), padded_past)
        scale = 1.0 + float(np.abs(plain).max())
        return float(np.abs(plain.astype(np.float64) - padded).max()) / scale

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
        ids_dtype = self.ids_dtype
        feed: dict[str, np.ndarray] = {
            "input_ids": input_ids.astype(ids_dtype, copy=False),
            "attention_mask": attention_mask.astype(ids_dtype, copy=False),
        }
        if self.signature.has_position_ids:
            feed["position_ids"] = position_ids.astype(ids_dtype, copy=False)
        if self.signature.has_use_cache_branch:
            feed["use_cache_branch"] = np.array([attention_mask.shape[1] > input_ids.shape[1]])
        feed.update(zip(self.signature.past_names, past, strict=True))
        logits, *presents = self.session.run(self._output_names, feed)
        return np.ascontiguousarray(logits[:, -1, :]), presents
