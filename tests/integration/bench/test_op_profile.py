"""bench.op_profile: ONNX Runtime's profiler over a prepared model's decode steps, per op type."""

from __future__ import annotations

from bench.op_profile import per_token, profile

from nrt.adapters.catalogue import prepare
from nrt.adapters.inference import CausalLM


def test_the_profile_splits_a_decode_step_by_op_type_and_matrix_role() -> None:
    artifact = prepare("tiny-llama", providers=("cpu",))
    ids = CausalLM.load(artifact.directory).encode("Hello there")
    by_op, by_role, counts, wall = per_token(profile(artifact.model_path, ids, 4))
    assert wall > 0
    assert by_op
    assert all(ms >= 0 for ms in by_op.values())
    assert sum(by_op.values()) <= wall * 1.5  # kernel time per step, not the whole run's
    matrices = [op for op in by_op if op in ("MatMul", "MatMulNBits")]
    assert matrices
    assert counts[matrices[0]] > 0
    assert by_role  # the matrices grouped by their node names' role
