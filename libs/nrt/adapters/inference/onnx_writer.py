"""Write a small ONNX model (a handful of standard ops) as protobuf bytes, without the ``onnx`` package.

The engine builds its helper graphs (:mod:`nrt.adapters.inference.kv_tensors`) at run time, where only
onnxruntime, tokenizers, numpy and msgspec are installed. Those graphs need a few fields of
``onnx.proto`` (ModelProto, GraphProto, NodeProto, AttributeProto, ValueInfoProto,
TensorProto), which this module encodes in protobuf's wire format: a field is a key
``(number << 3) | wire_type`` followed by a varint (wire type 0) or a length and bytes
(wire type 2). Field numbers follow ``onnx/onnx.proto`` (IR version 8, opset 18).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

IR_VERSION = 8
OPSET = 18

# TensorProto.DataType for the numpy dtypes the helper graphs carry
ELEMENT_TYPES = {
    "float32": 1,
    "uint8": 2,
    "int8": 3,
    "int32": 6,
    "int64": 7,
    "bool": 9,
    "float16": 10,
    "float64": 11,
}

_VARINT, _BYTES = 0, 2
_ATTRIBUTE_INT, _ATTRIBUTE_INTS = 2, 7  # AttributeProto.AttributeType


@dataclass(frozen=True, slots=True)
class Node:
    """One operator: ``op(inputs) -> outputs`` with integer attributes."""

    op: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attributes: dict[str, int | tuple[int, ...]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Value:
    """A graph input or output: its name, element type (numpy dtype name) and rank (dims left open)."""

    name: str
    dtype: str
    rank: int


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # int64 fields: negative values as two's complement, 10 bytes
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _int(number: int, value: int) -> bytes:
    return _varint(number << 3 | _VARINT) + _varint(value)


def _bytes(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | _BYTES) + _varint(len(payload)) + payload


def _str(number: int, text: str) -> bytes:
    return _bytes(number, text.encode())


def element_type(dtype: str) -> int:
    try:
        return ELEMENT_TYPES[dtype]
    except KeyError:
        raise ValueError(f"no ONNX element type for numpy dtype {dtype!r}") from None


def _attribute(name: str, value: int | tuple[int, ...]) -> bytes:
    if isinstance(value, int):
        return _str(1, name) + _int(3, value) + _int(20, _ATTRIBUTE_INT)
    return _str(1, name) + b"".join(_int(8, v) for v in value) + _int(20, _ATTRIBUTE_INTS)


def _node(node: Node, index: int) -> bytes:
    return (
        b"".join(_str(1, name) for name in node.inputs)
        + b"".join(_str(2, name) for name in node.outputs)
        + _str(3, f"{node.op}_{index}")
        + _str(4, node.op)
        + b"".join(_bytes(5, _attribute(k, v)) for k, v in node.attributes.items())
    )


def _value(value: Value) -> bytes:
    shape = b"".join(_bytes(1, b"") for _ in range(value.rank))  # a Dimension with neither value nor name
    tensor_type = _int(1, element_type(value.dtype)) + _bytes(2, shape)
    return _str(1, value.name) + _bytes(2, _bytes(1, tensor_type))


def _tensor(name: str, array: np.ndarray) -> bytes:
    data = np.asarray(array, order="C")  # (ascontiguousarray would make a scalar 1-d)
    return (
        b"".join(_int(1, d) for d in data.shape)
        + _int(2, element_type(data.dtype.name))
        + _str(8, name)
        + _bytes(9, data.astype(data.dtype.newbyteorder("<"), copy=False).tobytes())
    )


def model_bytes(
    name: str,
    nodes: Sequence[Node],
    inputs: Sequence[Value],
    outputs: Sequence[Value],
    constants: dict[str, np.ndarray] | None = None,
) -> bytes:
    """A serialized ``ModelProto`` of one graph over the default ONNX domain."""
    graph = (
        b"".join(_bytes(1, _node(node, i)) for i, node in enumerate(nodes))
        + _str(2, name)
        + b"".join(_bytes(5, _tensor(k, v)) for k, v in (constants or {}).items())
        + b"".join(_bytes(11, _value(v)) for v in inputs)
        + b"".join(_bytes(12, _value(v)) for v in outputs)
    )
    opset = _str(1, "") + _int(2, OPSET)
    return _int(1, IR_VERSION) + _str(2, "nrt") + _bytes(7, graph) + _bytes(8, opset)
