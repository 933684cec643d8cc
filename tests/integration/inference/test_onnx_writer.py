"""The engine's helper graphs are valid ONNX (checked by the onnx package) and compute what they say."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from nrt.adapters.inference.kv_tensors import _slice_graph, _tail_graph
from nrt.adapters.inference.onnx_writer import Node, Value, element_type, model_bytes


def test_the_helper_graphs_pass_the_onnx_checker() -> None:
    onnx = pytest.importorskip("onnx", reason="the onnx package (the export extra) checks the written protobuf")
    for graph in (_slice_graph(4, "float32"), _slice_graph(2, "float16"), _tail_graph("float16")):
        model = onnx.load_from_string(graph)
        onnx.checker.check_model(model, full_check=True)
    tail = onnx.load_from_string(_tail_graph("float32"))
    attributes = {a.name: a.i for node in tail.graph.node for a in node.attribute}
    assert attributes["axis"] == -1  # a negative int64 survives the varint encoding
    assert [i.name for i in tail.graph.initializer] == ["minus_one"]
    assert list(tail.graph.initializer[0].dims) == []  # a scalar stays a scalar


def test_a_written_graph_runs_in_onnx_runtime() -> None:
    graph = model_bytes(
        "t",
        [
            Node("Gather", ("x", "rows"), ("g",), {"axis": 0}),
            Node("Transpose", ("g",), ("y",), {"perm": (1, 0)}),
            Node("Add", ("y", "c"), ("z",)),
        ],
        [Value("x", "float32", 2), Value("rows", "int64", 1)],
        [Value("z", "float32", 2)],
        {"c": np.array(1.5, dtype=np.float32)},
    )
    session = ort.InferenceSession(graph, providers=["CPUExecutionProvider"])
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    (z,) = session.run(None, {"x": x, "rows": np.array([3, 1], dtype=np.int64)})
    np.testing.assert_array_equal(z, x[[3, 1]].T + 1.5)


def test_an_unknown_element_type_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="no ONNX element type for numpy dtype 'complex64'"):
        element_type("complex64")
