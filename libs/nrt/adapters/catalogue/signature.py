"""Read the input/output names of an ONNX graph with onnxruntime alone (no onnx, no torch)."""

from __future__ import annotations

from pathlib import Path

import msgspec
import onnxruntime as ort

from nrt.adapters.inference.artifact import PAST_RE, PRESENT_RE, layer_names


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
        return layer_names(self.input_names, PAST_RE)

    @property
    def present_outputs(self) -> tuple[str, ...]:
        return layer_names(self.output_names, PRESENT_RE)


def read_signature(model: Path) -> GraphSignature:
    """Inputs and outputs of the ONNX graph at ``model`` (a session is built, no graph optimisation)."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
    return GraphSignature(
        inputs=tuple(_io(item) for item in session.get_inputs()),
        outputs=tuple(_io(item) for item in session.get_outputs()),
    )


def _io(item: ort.NodeArg) -> GraphIO:
    shape = tuple(dim if isinstance(dim, int | str) else None for dim in (item.shape or ()))
    return GraphIO(name=item.name, shape=shape, type=item.type)
