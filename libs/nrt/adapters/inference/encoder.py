"""Sentence embeddings from a feature-extraction ONNX model (e.g. all-MiniLM-L6-v2).

Runs the encoder over padded batches, mean-pools ``last_hidden_state`` over the real
tokens (the attention mask), and L2-normalizes, as sentence-transformers does.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnxruntime as ort
from tokenizers import Tokenizer

from nrt.adapters.inference.artifact import TOKENIZER_FILE, read_hf_config, read_record, require_file
from nrt.adapters.inference.errors import ArtifactError
from nrt.adapters.inference.weights import active_provider, build_session, load_weights

FloatArray = npt.NDArray[np.float32]


class Encoder:
    """``embed(texts) -> [len(texts), hidden]`` unit-length float32 vectors."""

    def __init__(
        self,
        session: ort.InferenceSession,
        artifact_dir: Path | str,
        *,
        tokenizer: Tokenizer | None = None,
        max_length: int | None = None,
        batch_size: int = 32,
    ) -> None:
        self.artifact_dir = Path(artifact_dir)
        self.session = session
        self.provider = active_provider(session)
        self.batch_size = batch_size
        self._inputs = {i.name for i in session.get_inputs()}
        if not {"input_ids", "attention_mask"} <= self._inputs:
            raise ArtifactError(f"{self.artifact_dir}: encoder needs input_ids and attention_mask")
        outputs = [o.name for o in session.get_outputs()]
        self._output = "last_hidden_state" if "last_hidden_state" in outputs else outputs[0]
        record = read_record(self.artifact_dir)
        config = read_hf_config(self.artifact_dir)
        limit = max_length or record.context_length or config.max_position_embeddings or 512
        pad_id = record.pad_token_id if record.pad_token_id is not None else config.pad_token_id
        self.tokenizer = tokenizer or Tokenizer.from_file(str(require_file(self.artifact_dir, TOKENIZER_FILE)))
        self.tokenizer.enable_truncation(max_length=limit)
        padding = self.tokenizer.padding
        pad = int(padding["pad_id"]) if padding else (pad_id if pad_id is not None else 0)
        token = str(padding["pad_token"]) if padding else self.tokenizer.id_to_token(pad)
        self.tokenizer.enable_padding(pad_id=pad, pad_token=token or "[PAD]")  # to batch longest

    @classmethod
    def load(cls, artifact_dir: Path | str, providers: Sequence[str] | None = None) -> Encoder:
        return cls(build_session(load_weights(artifact_dir), providers), artifact_dir)

    @property
    def dimension(self) -> int:
        shape = next(o.shape for o in self.session.get_outputs() if o.name == self._output)
        dim = shape[-1]
        return dim if isinstance(dim, int) else len(self.embed(["x"])[0])

    def embed(self, texts: Sequence[str]) -> FloatArray:
        """Normalized mean-pooled embeddings, one row per text, in input order."""
        return self.embed_counted(texts)[0]

    def embed_counted(self, texts: Sequence[str]) -> tuple[FloatArray, int]:
        """``embed(texts)`` and the tokens the texts came to (special tokens included, after truncation)."""
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32), 0
        parts = [self._embed_batch(texts[i : i + self.batch_size]) for i in range(0, len(texts), self.batch_size)]
        return np.concatenate([vectors for vectors, _ in parts], axis=0), sum(tokens for _, tokens in parts)

    def _embed_batch(self, texts: Sequence[str]) -> tuple[FloatArray, int]:
        encodings = self.tokenizer.encode_batch(list(texts))
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        feed: dict[str, npt.NDArray[np.int64]] = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self._inputs:
            feed["token_type_ids"] = np.zeros_like(ids)
        (hidden,) = self.session.run([self._output], feed)
        weights = mask[:, :, None].astype(np.float32)
        summed = (np.asarray(hidden, dtype=np.float32) * weights).sum(axis=1)
        pooled = summed / np.maximum(weights.sum(axis=1), 1e-9)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        out: FloatArray = (pooled / np.maximum(norms, 1e-12)).astype(np.float32)
        return out, int(mask.sum())
