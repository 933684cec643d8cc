"""ONNX export and quantisation steps shared by the builders.

torch, transformers, optimum and onnx are imported inside the functions: they are
export-only dependencies (the ``export`` extra) and the runtime never loads this module's
imports unless it builds a model.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import shutil
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from nrt.adapters.inference.artifact import CONFIG_FILE, MODEL_FILE, external_data_files
from nrt.adapters.inference.errors import ArtifactError

_NOISY_LOGGERS = ("transformers", "optimum", "onnxruntime", "torch")
EXTERNAL_DATA_ABOVE = 1_800_000_000  # bytes of a model saved as one file; above, its weights go to a data file


def untyped(module: str) -> Any:
    """Import an export-only library lazily, as ``Any`` (transformers' own annotations are partial)."""
    return importlib.import_module(module)


def offline() -> None:
    """Conversion never reaches a model hub: everything comes from installed packages."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Silence the exporters' warnings and progress chatter for the duration of a step."""
    loggers = [logging.getLogger(name) for name in _NOISY_LOGGERS] + [logging.getLogger()]
    saved = [(logger, logger.level) for logger in loggers]
    try:
        for logger in loggers:
            logger.setLevel(logging.ERROR)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for logger, level in saved:
            logger.setLevel(level)


def export_causal_lm(model: Any, work: Path, *, add_position_ids: bool = False) -> Path:
    """Export a transformers causal LM with past key values; returns the export directory.

    The graph takes ``input_ids``, ``attention_mask``, ``position_ids`` (added for
    architectures whose optimum config omits it, when ``add_position_ids``) and
    ``past_key_values.{i}.key/value``, and returns ``logits`` and ``present.{i}.key/value``.
    """
    offline()
    from optimum.exporters.onnx import onnx_export_from_model
    from optimum.exporters.tasks import TasksManager

    output = work / "export"
    custom: dict[str, Any] | None = None
    if add_position_ids:
        base = TasksManager.get_exporter_config_constructor(
            exporter="onnx", model=model, task="text-generation-with-past", library_name="transformers"
        ).func

        class WithPositionIds(base):  # type: ignore[misc,valid-type]
            @property
            def inputs(self) -> dict[str, dict[int, str]]:
                common: dict[str, dict[int, str]] = super().inputs
                common["position_ids"] = {0: "batch_size", 1: "sequence_length"}
                return common

        custom = {
            "model": WithPositionIds(model.config, task="text-generation", use_past=True, use_past_in_inputs=True)
        }
    with quiet():
        onnx_export_from_model(
            model,
            output,
            task="text-generation-with-past",
            custom_onnx_configs=custom,
            do_validation=False,
        )
    require_model_file(output)
    return output


def export_feature_extraction(model: Any, work: Path) -> Path:
    """Export a transformers encoder for feature extraction (``last_hidden_state``)."""
    offline()
    from optimum.exporters.onnx import onnx_export_from_model

    output = work / "export"
    with quiet():
        onnx_export_from_model(model, output, task="feature-extraction", do_validation=False)
    require_model_file(output)
    return output


def require_model_file(directory: Path) -> None:
    """The export wrote ``model.onnx`` (with ``model.onnx_data`` beside it for weights over 2 GB)."""
    model = directory / MODEL_FILE
    if not model.is_file():
        raise ArtifactError(f"the export produced no {MODEL_FILE} in {directory}")


def save_model(model: Any, path: Path) -> None:
    """Save an ONNX model as ``path``: one file, or with its weights in ``<name>_data`` beside it when
    they exceed what one protobuf file holds (2 GB); a stale data file of an earlier save goes."""
    onnx = untyped("onnx")
    data = path.with_name(path.name + "_data")
    data.unlink(missing_ok=True)
    if not needs_external_data(model):
        onnx.save(model, str(path))
        return
    onnx.save(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True, location=data.name)


def needs_external_data(model: Any) -> bool:
    """Whether ``model`` must keep its weights in a data file: over :data:`EXTERNAL_DATA_ABOVE`, or so big
    that protobuf cannot even measure it (over 2 GB)."""
    try:
        return bool(model.ByteSize() >= EXTERNAL_DATA_ABOVE)
    except Exception:  # google.protobuf.message.EncodeError: past what one message can hold
        return True


def copy_model(source: Path, target: Path) -> None:
    """Copy ``model.onnx`` and its external data file, when it has one."""
    shutil.copyfile(source / MODEL_FILE, target / MODEL_FILE)
    for name in external_data_files(source):
        shutil.copyfile(source / name, target / name)


def move_export(export: Path, staging: Path, *, include_model: bool = True) -> None:
    """Move the exported ``model.onnx`` (optionally, with its external data) and ``config.json`` into the artifact."""
    names = (MODEL_FILE, *external_data_files(export), CONFIG_FILE) if include_model else (CONFIG_FILE,)
    for name in names:
        shutil.move(export / name, staging / name)
