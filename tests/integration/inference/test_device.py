"""The serving path keeps the KV cache on the session's device as OrtValues: IOBinding steps,
regrouping on the device (helper graphs), session caches that stay there and are freed on eviction."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import numpy as np
import pytest

from nrt.adapters.inference import BatchingGenerator, CausalLM, Chunk, GenerationRequest, bare_greedy
from nrt.adapters.inference.kv import BatchKV, RowKV
from nrt.adapters.inference.kv_tensors import DeviceOps, OrtValue, Piece, kv_nbytes

PROMPTS = [
    "The quick brown fox",
    "Hello",
    "System: you are a helpful assistant.\nUser: what is the capital of France?\nAssistant:",
    "Q: 2+2?\nA:",
    "Bonjour le monde, ça va?",
    "日本語のテキストです。",
    "Once upon a time",
    "def main():",
]


def ids(chunks: list[Chunk]) -> list[int]:
    return [t for c in chunks for t in c.token_ids]


async def run(gen: BatchingGenerator, request: GenerationRequest) -> list[Chunk]:
    return [chunk async for chunk in gen.generate(request)]


@pytest.fixture
def no_host_runs(tiny_llama: CausalLM, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail any ``session.run`` (the numpy API, whose presents come back as host arrays) from
    here on; the model's load-time padding probes (``can_batch``), which use it, run first."""
    assert tiny_llama.can_batch

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the serving path ran session.run (numpy presents) instead of its IOBinding")

    monkeypatch.setattr(tiny_llama.session, "run", refuse)


def random_kv(ops: DeviceOps, batch: int, width: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    shape = (batch, ops.heads, width, ops.head_dim)
    return [rng.standard_normal(shape).astype(ops.kv_dtype) for _ in range(ops.tensors)]


def padded(rows: np.ndarray, width: int) -> np.ndarray:
    """Right-align ``rows``' columns in ``width`` columns, zeros on the left."""
    out = np.zeros((*rows.shape[:2], width, rows.shape[3]), dtype=rows.dtype)
    out[:, :, width - rows.shape[2] :, :] = rows
    return out


def test_assemble_gathers_slices_and_left_pads_on_the_device(tiny_llama: CausalLM) -> None:
    ops = tiny_llama.ops
    batch = random_kv(ops, 3, 7, seed=1)
    joiner = random_kv(ops, 1, 4, seed=2)
    # rows 2 and 0 of the batch, trimmed to their last 5 columns, then the joiner padded to 5
    out = ops.assemble([Piece(ops.from_host(batch), [2, 0], 2, 7), Piece(ops.from_host(joiner), [0], 0, 4)], 5)
    assert all(isinstance(v, OrtValue) for v in out)
    for t, value in enumerate(ops.to_host(out)):
        expected = np.concatenate([batch[t][[2, 0], :, 2:, :], padded(joiner[t][:, :, 0:4, :], 5)])
        np.testing.assert_array_equal(value, expected)
    # widening: every kept row padded on the left
    wide = ops.to_host(ops.assemble([Piece(ops.from_host(batch), [1], 0, 7)], 10))
    for t, value in enumerate(wide):
        np.testing.assert_array_equal(value, padded(batch[t][[1]], 10))
    with pytest.raises(ValueError, match="does not fit"):
        ops.assemble([Piece(ops.from_host(batch), [0], 0, 7)], 6)


def test_select_copies_a_row_and_leaves_the_source_unchanged(tiny_llama: CausalLM) -> None:
    ops = tiny_llama.ops
    batch = random_kv(ops, 2, 6, seed=3)
    source = ops.from_host(batch)
    row = ops.select(source, [1], 2, 6)
    for t, value in enumerate(ops.to_host(row)):
        np.testing.assert_array_equal(value, batch[t][1:2, :, 2:6, :])
    for t, value in enumerate(ops.to_host(source)):
        np.testing.assert_array_equal(value, batch[t])
    assert kv_nbytes(row) == sum(a[1:2, :, 2:6, :].nbytes for a in batch)


def test_logits_views_and_helper_graphs_agree(tiny_llama: CausalLM, tiny_llama_dir: Any) -> None:
    host = CausalLM(tiny_llama.session, tiny_llama_dir, helper_graphs=False)
    helpers = CausalLM(tiny_llama.session, tiny_llama_dir, helper_graphs=True)
    prompt = np.array([tiny_llama.encode(PROMPTS[2])] * 2, dtype=np.int64)
    n = prompt.shape[1]
    logits, _ = host.stepper().run(prompt, np.ones_like(prompt), np.tile(np.arange(n), (2, 1)), host.ops.empty_past(2))
    expected = logits.numpy()[:, -1, :]
    for model in (host, helpers):
        np.testing.assert_array_equal(model.ops.last_logits(logits), expected)
        np.testing.assert_array_equal(model.ops.greedy(logits), expected.argmax(axis=-1))


@pytest.mark.usefixtures("no_host_runs")
def test_steps_keep_the_cache_as_ortvalues_and_match_the_bare_loop(tiny_llama: CausalLM, tiny_llama_dir: Any) -> None:
    prompt = tiny_llama.encode(PROMPTS[0])
    from nrt.adapters.inference import build_session, load_weights

    expected = bare_greedy(build_session(load_weights(tiny_llama_dir), ["CPUExecutionProvider"]), prompt, 16)
    stepper, ops = tiny_llama.stepper(), tiny_llama.ops
    ids_ = np.array([prompt], dtype=np.int64)
    n = len(prompt)
    logits, past = stepper.run(ids_, np.ones_like(ids_), np.arange(n)[None, :], ops.empty_past())
    tokens = [int(ops.greedy(logits)[0])]
    for step in range(15):
        assert all(isinstance(v, OrtValue) and v.device_name().lower() == "cpu" for v in past)
        assert all(v.shape()[2] == n + step for v in past)  # the presents grow by one column a step
        length = n + step
        logits, past = stepper.run(
            np.array([[tokens[-1]]]), np.ones((1, length + 1), dtype=np.int64), np.array([[length]]), past
        )
        tokens.append(int(ops.greedy(logits)[0]))
    assert tokens == expected


@pytest.mark.usefixtures("no_host_runs")
@pytest.mark.parametrize("concurrent", [1, 8])
async def test_batched_rows_on_the_device_path_equal_each_row_alone(
    tiny_llama: CausalLM, tiny_llama_dir: Any, concurrent: int
) -> None:
    from nrt.adapters.inference import build_session, load_weights

    reference = build_session(load_weights(tiny_llama_dir), ["CPUExecutionProvider"])
    requests = [GenerationRequest(prompt=p, max_tokens=6 + 3 * i) for i, p in enumerate(PROMPTS[:concurrent])]
    gen = BatchingGenerator(tiny_llama, max_batch_size=8)
    try:
        together = await asyncio.gather(*(run(gen, r) for r in requests))
        for request, chunks in zip(requests, together, strict=True):
            tokens = ids(chunks)
            assert tokens == bare_greedy(reference, tiny_llama.encode(request.prompt), len(tokens))
        if concurrent > 1:
            assert max(c[-1].timings.batch_size_max for c in together if c[-1].timings) > 1
    finally:
        await gen.aclose()


@pytest.mark.usefixtures("no_host_runs")
async def test_session_cache_stays_on_the_device_and_eviction_releases_it(tiny_llama: CausalLM) -> None:
    gen = BatchingGenerator(tiny_llama, max_batch_size=8)
    try:
        # two sessions decoding side by side: each one's cache is cut out of the shared batch
        first = await asyncio.gather(
            run(gen, GenerationRequest(prompt=PROMPTS[2], max_tokens=9, session_id="a")),
            run(gen, GenerationRequest(prompt=PROMPTS[4], max_tokens=5, session_id="b")),
        )
        spec = tiny_llama.spec
        per_token = 2 * spec.num_layers * spec.num_kv_heads * spec.head_dim * tiny_llama.kv_dtype.itemsize
        held = gen.sessions.take("a")
        assert held is not None
        assert all(isinstance(v, OrtValue) and v.device_name().lower() == "cpu" for v in held.past)
        usage = first[0][-1].usage
        assert usage is not None
        assert held.nbytes == kv_nbytes(held.past) == (usage.prompt_tokens + usage.completion_tokens - 1) * per_token
        gen.sessions.put("a", held)

        follow = PROMPTS[2] + "".join(c.text for c in first[0]) + "\nUser: and Italy?\nAssistant:"
        cached = await run(gen, GenerationRequest(prompt=follow, max_tokens=6, session_id="a"))
        cached_usage = cached[-1].usage
        assert cached_usage is not None
        assert cached_usage.cached_tokens == usage.prompt_tokens + usage.completion_tokens - 1

        kept = gen.sessions.take("a")
        assert kept is not None
        value = kept.past[0]
        gen.sessions.put("a", kept)
        del kept
        assert gen.evict_session("a") > 0
        assert gen.session_bytes("a") == 0
        # nothing else still holds the tensor, so dropping this last reference frees its memory:
        # no Python object (the store, the batch) refers to it, and the IOBinding holds no output
        assert sys.getrefcount(value) == 2  # ``value`` and getrefcount's own argument
        assert gen.stats().active == 0
        assert gen._stepper.binding.bound_outputs() == 0
    finally:
        await gen.aclose()


def test_assemble_right_pads_for_a_fused_graph(tiny_llama: CausalLM) -> None:
    """A GroupQueryAttention graph reads each row from column 0: rows left-aligned, zeros on the right."""
    ops = tiny_llama.ops
    batch = random_kv(ops, 2, 6, seed=4)
    joiner = random_kv(ops, 1, 3, seed=5)
    out = ops.assemble(
        [Piece(ops.from_host(batch), [1, 0], 0, 4), Piece(ops.from_host(joiner), [0], 0, 3)], 5, right_padded=True
    )
    for t, value in enumerate(ops.to_host(out)):
        expected = np.zeros((3, *batch[t].shape[1:2], 5, batch[t].shape[3]), dtype=batch[t].dtype)
        expected[:2, :, :4] = batch[t][[1, 0], :, :4]
        expected[2:, :, :3] = joiner[t][:, :, :3]
        np.testing.assert_array_equal(value, expected)


def test_right_padded_batch_keeps_rows_from_column_zero(tiny_llama: CausalLM) -> None:
    """BatchKV(right_padded=True): the mask covers each row's first ``length + 1`` columns, a row comes
    back from column 0, and a rebuild keeps every row left-aligned."""
    ops = tiny_llama.ops
    a, b = random_kv(ops, 1, 5, seed=6), random_kv(ops, 1, 2, seed=7)
    kv = BatchKV(right_padded=True)
    kv.rebuild([], [RowKV(ops.from_host(a), 5), RowKV(ops.from_host(b), 2)], ops)
    assert kv.width == 5
    np.testing.assert_array_equal(kv.attention_mask(), [[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0]])
    for t, value in enumerate(ops.to_host(list(kv.row(1, ops)))):
        np.testing.assert_array_equal(value, b[t])
    kv.rebuild([1], [], ops)  # the long row leaves: the short one is trimmed to its own length
    assert kv.width == 2
    for t, value in enumerate(ops.to_host(kv.past)):
        np.testing.assert_array_equal(value, b[t])
