"""The simplest possible ONNX Runtime greedy loop: the floor the engine is measured against.

No scheduler, no streaming, no detokenization: prefill once, then feed each argmax back
with the previous step's ``present`` tensors as the next ``past``. Plain ``session.run``
with numpy arrays, exactly what a user would write by hand.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnxruntime as ort

from nrt.adapters.inference.artifact import LOGITS_TO_KEEP

_DTYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16}


def bare_greedy(session: ort.InferenceSession, ids: Sequence[int], n: int) -> list[int]:
    """Greedily generate ``n`` tokens after ``ids`` (no EOS handling)."""
    inputs = session.get_inputs()
    past_inputs = [i for i in inputs if i.name.startswith("past_key_values.")]
    has_positions = any(i.name == "position_ids" for i in inputs)
    output_names = ["logits", *(i.name.replace("past_key_values", "present") for i in past_inputs)]
    feed: dict[str, np.ndarray] = {
        i.name: np.zeros((1, i.shape[1], 0, i.shape[3]), dtype=_DTYPES.get(i.type, np.float32)) for i in past_inputs
    }
    if any(i.name == LOGITS_TO_KEEP for i in inputs):  # the graph can skip the logits it would discard
        feed[LOGITS_TO_KEEP] = np.array(1, dtype=np.int64)
    step_ids = np.array([list(ids)], dtype=np.int64)
    length = 0
    out: list[int] = []
    for _ in range(n):
        total = length + step_ids.shape[1]
        feed["input_ids"] = step_ids
        feed["attention_mask"] = np.ones((1, total), dtype=np.int64)
        if has_positions:
            feed["position_ids"] = np.arange(length, total, dtype=np.int64)[None, :]
        logits, *presents = session.run(output_names, feed)
        for i, present in zip(past_inputs, presents, strict=True):
            feed[i.name] = present
        token = int(np.argmax(logits[0, -1]))
        out.append(token)
        step_ids = np.array([[token]], dtype=np.int64)
        length = total
    return out
