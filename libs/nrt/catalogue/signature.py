"""Read the input/output names of an ONNX graph with onnxruntime alone (no onnx, no torch)."""

from __future__ import annotations

import re
from pathlib import Path

import msgspec
import onnxruntime as ort

_PAST = re.compile(r"^past_key_values\.(\d+)\.(key|value)$")
_PRESENT = re.compile(r"^present\.(\d+)\.(key|value)$")
_NUMPY_DTYPES = {
    "tensor(float)": "float32",
    "tensor(float16)": "float16",
    "tensor(bfloat16)": "bfloat16",
    "tensor(double)": "float64",
}


class GraphIO(msgspec.Struct, frozen=True):
    """One graph input or output: name, shape (int or symbolic name per axis) and element type."""

    name: str
    shape: tuple[int | str | None, ...]
    type: str


class GraphSignature(msgspec.Struct, frozen=True):
    inputs: tuple[GraphIO, ...]
    outputs: tuple[GraphIO, ...]

    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(item.name for item in self.inputs)

    @property
    def output_names(self) -> tuple[str, ...]:
        return tuple(item.name for item in self.outputs)

    def input(self, name: str) -> GraphIO | None:
        return next((item for item in self.inputs if item.name == name), None)

    def output(self, name: str) -> GraphIO | None:
        return next((item for item in self.outputs if item.name == name), None)

    @property
    def past_inputs(self) -> tuple[str, ...]:
        """``past_key_values.{i}.key/value`` in layer order, key before value."""
        return _layer_ordered(self.input_names, _PAST)

    @property
    def present_outputs(self) -> tuple[str, ...]:
        return _layer_ordered(self.output_names, _PRESENT)


def read_signature(model: Path) -> GraphSignature:
    """Inputs and outputs of the ONNX graph at ``model`` (a session is built, no graph optimisation)."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
    return GraphSignature(
        inputs=tuple(_io(item) for item in session.get_inputs()),
        outputs=tuple(_io(item) for item in session.get_outputs()),
    )


def numpy_dtype(onnx_type: str) -> str | None:
    """``tensor(float)`` -> ``float32``; None for types the catalogue does not expect for KV."""
    return _NUMPY_DTYPES.get(onnx_type)


def static_dim(value: int | str | None) -> int | None:
    return value if isinstance(value, int) and value > 0 else None


def _io(item: ort.NodeArg) -> GraphIO:
    shape = tuple(dim if isinstance(dim, int | str) else None for dim in (item.shape or ()))
    return GraphIO(name=item.name, shape=shape, type=item.type)


def _layer_ordered(names: tuple[str, ...], pattern: re.Pattern[str]) -> tuple[str, ...]:
    found: dict[tuple[int, int], str] = {}
    for name in names:
        match = pattern.match(name)
        if match:
            found[(int(match.group(1)), 0 if match.group(2) == "key" else 1)] = name
    return tuple(found[key] for key in sorted(found))
