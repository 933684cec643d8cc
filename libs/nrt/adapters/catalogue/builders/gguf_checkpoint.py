"""De-quantise a GGUF file into a Hugging Face checkpoint directory, which is then prepared as any checkpoint.

The checkpoint holds ``config.json`` (:mod:`nrt.adapters.catalogue.gguf_config`), the weights as
float32 ``model.safetensors``, ``generation_config.json`` (the ids a turn ends at), and the
tokenizer (:mod:`nrt.adapters.catalogue.gguf_tokenizer`): ``tokenizer.json`` and
``tokenizer_config.json`` with the GGUF's chat template.

The weights go through transformers' GGUF support: its tensor name map
(``get_gguf_hf_weights_map``) and its per-architecture tensor processors, which undo what
llama.cpp's converter did (Llama's query/key row permutation, Gemma's ``1 + w`` norms). The file is
read with :mod:`nrt.adapters.catalogue.gguf_header`, not with ``from_pretrained(gguf_file=...)``:
that needs ``accelerate``, and reads the file twice with the ``gguf`` package's slow reader.
A tensor nothing maps, or a model weight no tensor fills, is an error: never a half-random model.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from nrt.adapters.catalogue.builders.export import quiet, untyped
from nrt.adapters.catalogue.gguf_config import ROPE_FREQS, hf_config
from nrt.adapters.catalogue.gguf_header import GgufHeader, read_header, tensor_data
from nrt.adapters.catalogue.gguf_tokenizer import gguf_tokenizer
from nrt.adapters.inference.artifact import CONFIG_FILE, TOKENIZER_FILE
from nrt.adapters.inference.errors import ArtifactError

GENERATION_CONFIG = "generation_config.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
_HYPER_PARAMETER_TENSORS = {ROPE_FREQS}  # read into config.json by gguf_config


def write_checkpoint(gguf: Path, target: Path) -> Path:
    """The GGUF file ``gguf`` as a float32 Hugging Face checkpoint in ``target`` (created); ``target``."""
    header = read_header(gguf)
    config = hf_config(header)
    tokenizer = gguf_tokenizer(header, config.get("max_position_embeddings"))
    target.mkdir(parents=True, exist_ok=True)
    model = load_model(header, config)
    with quiet():
        model.save_pretrained(str(target), safe_serialization=True)
    del model
    gc.collect()
    tokenizer.tokenizer.save(str(target / TOKENIZER_FILE))
    (target / TOKENIZER_CONFIG).write_text(json.dumps(tokenizer.config, indent=2, ensure_ascii=False), encoding="utf-8")
    generation = {
        key: value
        for key, value in (
            ("bos_token_id", config.get("bos_token_id")),
            ("eos_token_id", list(tokenizer.end_of_turn) or config.get("eos_token_id")),
            ("pad_token_id", config.get("pad_token_id")),
        )
        if value is not None
    }
    (target / GENERATION_CONFIG).write_text(json.dumps(generation, indent=2), encoding="utf-8")
    if not (target / CONFIG_FILE).is_file():
        raise ArtifactError(f"{gguf}: the de-quantised checkpoint has no {CONFIG_FILE}")
    return target


def load_model(header: GgufHeader, config: dict[str, Any]) -> Any:
    """A float32 transformers causal LM of ``config`` holding the GGUF's weights, de-quantised."""
    import torch

    transformers = untyped("transformers")
    gguf_utils = untyped("transformers.modeling_gguf_pytorch_utils")
    no_init_weights = untyped("transformers.modeling_utils").no_init_weights

    settings = dict(config)
    hf = transformers.AutoConfig.for_model(settings.pop("model_type"), **settings)
    with quiet(), no_init_weights():
        model = transformers.AutoModelForCausalLM.from_config(hf, torch_dtype=torch.float32)
    names = gguf_utils.get_gguf_hf_weights_map(model)
    processor = gguf_utils.TENSOR_PROCESSORS.get(header.architecture, gguf_utils.TensorProcessor)(config=config)
    state: dict[str, Any] = {}
    for tensor in header.tensors:
        if tensor.name in _HYPER_PARAMETER_TENSORS:
            continue
        if tensor.name not in names:
            raise ArtifactError(
                f"{header.path}: tensor {tensor.name} has no place in a transformers {config['model_type']} model"
            )
        processed = processor.process(weights=tensor_data(header.path, tensor), name=tensor.name)
        state[names[tensor.name]] = torch.from_numpy(np.ascontiguousarray(processed.weights, dtype=np.float32))
    missing, unexpected = model.load_state_dict(state, strict=False, assign=True)
    allowed = {"lm_head.weight"} if hf.tie_word_embeddings else set()
    if set(missing) - allowed or unexpected:
        raise ArtifactError(
            f"{header.path}: the GGUF's tensors do not fit a {config['model_type']} model: "
            f"missing {sorted(set(missing) - allowed)}, unexpected {sorted(unexpected)}"
        )
    model.tie_weights()
    return model.eval()


def row_order(gguf: Path) -> Callable[[str, npt.NDArray[Any]], npt.NDArray[Any]]:
    """How a tensor of ``gguf`` becomes the checkpoint's (:func:`load_model` does it to the weights): what
    transformers' GGUF reader does to a matrix is to reorder its rows (Llama's query and key), so the
    same applies to its quantised blocks and their scales."""
    header = read_header(gguf)
    config = hf_config(header)
    gguf_utils = untyped("transformers.modeling_gguf_pytorch_utils")
    processor = gguf_utils.TENSOR_PROCESSORS.get(header.architecture, gguf_utils.TensorProcessor)(config=config)

    def rows(name: str, array: npt.NDArray[Any]) -> npt.NDArray[Any]:
        reordered: npt.NDArray[Any] = processor.process(weights=array, name=name).weights
        return reordered

    return rows
