"""Sentence embeddings: mean pooling over real tokens, L2-normalized, order preserved."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from nrt.adapters.inference import Encoder

TEXTS = ["The quick brown fox", "Hello", "日本語のテキストです。", "Bonjour le monde, ça va? Très bien, merci."]


def test_embeddings_are_normalized_mean_pools_matching_transformers(tiny_bert_dir: Path) -> None:
    import torch
    from tokenizers import Tokenizer
    from transformers import BertModel

    encoder = Encoder.load(tiny_bert_dir, ["CPUExecutionProvider"])
    vectors = encoder.embed(TEXTS)
    assert vectors.shape == (len(TEXTS), 32)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)

    model = BertModel.from_pretrained(tiny_bert_dir / "_hf").eval()
    tokenizer = Tokenizer.from_file(str(tiny_bert_dir / "tokenizer.json"))
    for text, vector in zip(TEXTS, vectors, strict=True):
        ids = torch.tensor([tokenizer.encode(text).ids])
        with torch.no_grad():
            hidden = model(input_ids=ids, attention_mask=torch.ones_like(ids)).last_hidden_state[0]
        pooled = hidden.mean(dim=0)
        expected = (pooled / pooled.norm()).numpy()
        np.testing.assert_allclose(vector, expected, atol=1e-5)


def test_batching_and_padding_do_not_change_embeddings(tiny_bert_dir: Path) -> None:
    encoder = Encoder.load(tiny_bert_dir, ["CPUExecutionProvider"])
    together = encoder.embed(TEXTS)
    one_by_one = np.stack([encoder.embed([t])[0] for t in TEXTS])
    np.testing.assert_allclose(together, one_by_one, atol=1e-5)
    assert encoder.embed([]).shape == (0, encoder.dimension)
    similarity = together @ together.T
    assert np.argmax(similarity[0]) == 0
