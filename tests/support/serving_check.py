"""A prepared decoder served as the worker serves it, checked against the bare greedy loop."""

from __future__ import annotations

from pathlib import Path

from nrt.adapters.inference import BatchingGenerator, CausalLM, GenerationRequest, build_session, load_weights
from nrt.adapters.inference.bare import bare_greedy

PROVIDERS = ["CPUExecutionProvider"]


async def served_tokens(directory: Path, prompt: str = "hello there", max_tokens: int = 5) -> list[int]:
    """The tokens the batching generator serves for ``prompt`` from the artifact in ``directory``, which
    must be the bare greedy loop's on the same session (1 to ``max_tokens`` of them)."""
    model = CausalLM(build_session(load_weights(directory), PROVIDERS), directory)
    generator = BatchingGenerator(model, max_batch_size=2)
    try:
        chunks = [chunk async for chunk in generator.generate(GenerationRequest(prompt=prompt, max_tokens=max_tokens))]
    finally:
        await generator.aclose()
    tokens = [token for chunk in chunks for token in chunk.token_ids]
    assert 1 <= len(tokens) <= max_tokens
    assert tokens == bare_greedy(model.session, model.encode(prompt), len(tokens))
    return tokens
