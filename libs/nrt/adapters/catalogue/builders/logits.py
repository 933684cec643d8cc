"""Add a ``logits_to_keep`` input to a causal-LM graph: the LM head projects only the last positions.

An optimum export computes logits for every position of the input. Serving needs the last
one only (the next token), yet the LM head of Gemma 3 270M is the largest matrix of the model
(640 x 262,144): on a 9-token prompt it took about a third of the prefill, for eight rows of
logits thrown away. This rewrite slices the hidden states entering the LM head to their last
``logits_to_keep`` positions (``0`` keeps them all, like transformers' argument of the same
name), so prefill pays for one row; the engine feeds 1 when it generates and 0 when it scores
every position (label likelihoods).

The LM head is the ``MatMul`` (or ``MatMulNBits`` after :mod:`nrt.adapters.catalogue.builders.quantize`)
that produces ``logits``, directly or through element-wise ops (a logit soft-cap).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from nrt.adapters.catalogue.builders.export import save_model, untyped
from nrt.adapters.inference.artifact import LOGITS_TO_KEEP
from nrt.adapters.inference.errors import ArtifactError

INPUT = LOGITS_TO_KEEP
_HEADS = ("MatMul", "MatMulNBits")
_ELEMENTWISE = ("Div", "Mul", "Tanh", "Add", "Sub", "Cast")


def add_logits_to_keep(path: Path) -> None:
    """Rewrite ``path`` (``model.onnx``, its external data read too) in place; a graph that has the input already is left as is."""
    onnx = untyped("onnx")
    model = onnx.load(str(path))
    graph = model.graph
    if any(i.name == INPUT for i in graph.input):
        return
    head = _lm_head(graph)
    helper, numpy_helper = onnx.helper, untyped("onnx.numpy_helper")
    hidden = head.input[0]
    names = {suffix: f"/nrt/{INPUT}/{suffix}" for suffix in ("one", "axis", "end", "count", "start", "hidden")}
    graph.initializer.extend(
        [
            numpy_helper.from_array(np.array([1], dtype=np.int64), names["one"]),
            numpy_helper.from_array(np.array([1], dtype=np.int64), names["axis"]),
            numpy_helper.from_array(np.array([np.iinfo(np.int64).max], dtype=np.int64), names["end"]),
        ]
    )
    graph.input.append(helper.make_tensor_value_info(INPUT, onnx.TensorProto.INT64, []))
    nodes = [
        helper.make_node("Reshape", [INPUT, names["one"]], [names["count"]], name=names["count"]),
        helper.make_node("Neg", [names["count"]], [names["start"]], name=names["start"]),
        helper.make_node(
            "Slice", [hidden, names["start"], names["end"], names["axis"]], [names["hidden"]], name=names["hidden"]
        ),
    ]
    head.input[0] = names["hidden"]
    index = list(graph.node).index(head)
    for offset, node in enumerate(nodes):
        graph.node.insert(index + offset, node)
    save_model(model, path)


def _lm_head(graph: Any) -> Any:
    producers = {output: node for node in graph.node for output in node.output}
    node = producers.get("logits")
    while node is not None and node.op_type in _ELEMENTWISE:
        node = producers.get(node.input[0])
    if node is None or node.op_type not in _HEADS:
        raise ArtifactError("no MatMul produces the graph's logits: cannot add a logits_to_keep input")
    return node
