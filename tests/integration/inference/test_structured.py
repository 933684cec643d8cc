"""Structured outputs on the tiny model (random weights, real ONNX Runtime, real llguidance): whatever
the weights, every answer under a JSON schema parses and validates against it.

Schemas come from hypothesis. Their leaves are bounded (strings with a maxLength, numbers within a
range and of a fixed precision, arrays with a maxItems) so that a complete answer fits in the model's
small context: a random model has no reason to close a string, and the grammar lets it go on as long
as the schema allows.
Every constrained request runs in the same batch as a free one, which must answer exactly what it
answers alone.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, Field

from nrt.adapters.catalogue import prepare
from nrt.adapters.inference import BatchingGenerator, CausalLM, Chunk, GenerationRequest, GrammarError
from nrt.core.protocol import ResponseFormat

MAX_TOKENS = 160


def bounded_leaf() -> st.SearchStrategy[dict[str, Any]]:
    small = st.integers(min_value=-1000, max_value=1000)
    integer = st.tuples(small, st.integers(min_value=0, max_value=500)).map(
        lambda p: {"type": "integer", "minimum": p[0], "maximum": p[0] + p[1]}
    )
    number = st.tuples(small, st.integers(min_value=1, max_value=100)).map(
        lambda p: {"type": "number", "minimum": p[0], "maximum": p[0] + p[1], "multipleOf": 0.25}
    )
    string = st.integers(min_value=0, max_value=8).map(lambda n: {"type": "string", "maxLength": n})
    scalars = st.one_of(st.integers(-9, 9), st.booleans(), st.none(), st.text("abcxyz", max_size=4))
    enum = st.lists(scalars, min_size=1, max_size=4, unique_by=lambda v: json.dumps(v)).map(lambda v: {"enum": v})
    simple = st.sampled_from([{"type": "boolean"}, {"type": "null"}])
    return st.one_of(integer, number, string, enum, simple)


def containers(children: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    array = st.tuples(children, st.integers(0, 3)).map(lambda p: {"type": "array", "items": p[0], "maxItems": p[1]})
    names = st.text("abcdefgh", min_size=1, max_size=5)
    props = st.dictionaries(names, children, min_size=1, max_size=3)

    def as_object(properties: dict[str, Any], required_mask: int) -> dict[str, Any]:
        required = [n for i, n in enumerate(sorted(properties)) if required_mask >> i & 1]
        return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}

    obj = st.tuples(props, st.integers(0, 7)).map(lambda p: as_object(*p))
    return st.one_of(array, obj)


SCHEMAS = st.recursive(bounded_leaf(), containers, max_leaves=6)


@pytest.fixture(scope="module")
def engine(tiny_llama: CausalLM) -> Iterator[BatchingGenerator]:
    generator = BatchingGenerator(tiny_llama, max_batch_size=8)
    yield generator
    generator.close()


async def answer(engine: BatchingGenerator, request: GenerationRequest) -> tuple[str, Chunk]:
    text, last = "", None
    async for chunk in engine.generate(request):
        text, last = text + chunk.text, chunk
    assert last is not None
    return text, last


def constrained(schema: dict[str, Any], temperature: float, seed: int) -> GenerationRequest:
    fmt = ResponseFormat(type="json_schema", schema=json.dumps(schema), name="s")
    return GenerationRequest(
        prompt="Answer in JSON:", max_tokens=MAX_TOKENS, temperature=temperature, seed=seed, response_format=fmt
    )


FREE = GenerationRequest(prompt="Tell me a story", max_tokens=40, ignore_eos=True)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(schema=SCHEMAS, temperature=st.sampled_from([0.0, 0.8]), seed=st.integers(0, 2**31))
def test_every_answer_validates_against_its_generated_schema(
    engine: BatchingGenerator, schema: dict[str, Any], temperature: float, seed: int
) -> None:
    async def both() -> tuple[tuple[str, Chunk], tuple[str, Chunk], tuple[str, Chunk]]:
        alone = await answer(engine, FREE)
        together = await asyncio.gather(answer(engine, constrained(schema, temperature, seed)), answer(engine, FREE))
        return together[0], together[1], alone

    (text, last), (free_text, _), (alone_text, _) = asyncio.run(both())
    assert last.finish_reason == "stop", f"incomplete answer {text!r} for {schema}"
    jsonschema.validate(json.loads(text), schema)
    # the free request answered what it answers alone, sharing the batch with the constrained one
    # whenever that one decoded at all (one token is chosen at the end of the prompt, before any batch)
    assert free_text == alone_text
    assert last.usage is not None
    assert last.timings is not None
    if last.usage.completion_tokens > 1:
        assert last.timings.batch_size_max == 2


PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "minItems": 2, "maxItems": 4},
        "ok": {"type": "boolean"},
    },
    "required": ["name", "age", "tags", "ok"],
    "additionalProperties": False,
}


def test_a_full_batch_mixes_constrained_and_free_requests(engine: BatchingGenerator) -> None:
    schemas = [PERSON, {"type": "array", "items": PERSON, "minItems": 1, "maxItems": 2}]
    free = [
        GenerationRequest(prompt=f"story {i}", max_tokens=30, ignore_eos=True, seed=i, temperature=0.7)
        for i in range(4)
    ]
    bound = [constrained(schemas[i % 2], 0.7 * (i % 2), i) for i in range(4)]

    async def run() -> tuple[list[tuple[str, Chunk]], list[tuple[str, Chunk]]]:
        alone = [await answer(engine, r) for r in free]
        together = await asyncio.gather(*(answer(engine, r) for r in [*bound, *free]))
        return alone, list(together)

    alone, together = asyncio.run(run())
    for i, (text, last) in enumerate(together[:4]):
        assert last.finish_reason == "stop", text
        jsonschema.validate(json.loads(text), schemas[i % 2])
        assert last.timings is not None
        assert last.timings.batch_size_max >= 5  # decoded beside the free requests
    assert [text for text, _ in together[4:]] == [text for text, _ in alone]


def test_json_object_answers_an_object(engine: BatchingGenerator) -> None:
    fmt = ResponseFormat(type="json_object")
    texts = []
    for seed in range(3):
        request = GenerationRequest(
            prompt="JSON:", max_tokens=MAX_TOKENS, temperature=1.0, seed=seed, response_format=fmt
        )
        text, last = asyncio.run(answer(engine, request))
        if last.finish_reason == "stop":  # a random model may write keys until the context ends
            texts.append(text)
    assert texts, "no seed completed an object"
    assert all(isinstance(json.loads(t), dict) for t in texts)


def test_a_schema_compiles_once_and_the_cache_is_bounded(tiny_llama: CausalLM) -> None:
    engine = BatchingGenerator(tiny_llama, max_batch_size=4)
    engine.grammars.capacity = 2
    try:
        schemas = [{"type": "integer", "minimum": 0, "maximum": n} for n in (9, 99, 999)]
        for schema in [schemas[0], schemas[0], schemas[1], schemas[0], schemas[2]]:
            text, _ = asyncio.run(answer(engine, constrained(schema, 0.0, 0)))
            jsonschema.validate(json.loads(text), schema)
        assert engine.grammars.compiled == 3  # the repeats were served from the cache
        assert len(engine.grammars) == 2  # LRU-bounded
    finally:
        engine.close()


@pytest.mark.parametrize(
    ("schema", "says"),
    [
        ('{"type": "strin"}', "Invalid type: strin"),
        ('{"not": {"type": "string"}}', "Unimplemented keys"),
        ('{"type": "string", "minLength": 5, "maxLength": 2}', "Unsatisfiable schema"),
        ("[1]", "not a JSON object"),
    ],
)
def test_a_schema_the_engine_cannot_compile_fails_before_any_token(
    engine: BatchingGenerator, schema: str, says: str
) -> None:
    request = GenerationRequest(
        prompt="x", max_tokens=5, response_format=ResponseFormat(type="json_schema", schema=schema)
    )
    with pytest.raises(GrammarError, match=says):
        asyncio.run(answer(engine, request))


class Capital(BaseModel):
    """What a small specialist is asked for: a record it cannot be trusted to write as JSON unaided.
    Closed (``additionalProperties: false``), as OpenAI's strict mode makes every schema: an open one
    lets the model add keys of its own, and Gemma does."""

    model_config = ConfigDict(extra="forbid")

    country: str = Field(max_length=40)
    capital: str = Field(max_length=40)
    population_millions: int = Field(ge=0, le=2000)
    landlocked: bool
    languages: list[str] = Field(min_length=1, max_length=4)


@pytest.mark.slow
def test_gemma_answers_a_pydantic_schema_beside_a_free_request() -> None:
    """Gemma 3 270M (the catalogue's, prepared once under NRT_HOME): greedy, the answer parses into the
    model and says something true; a free request in the same batch is unchanged by it."""
    artifact = prepare("gemma3-270m")
    engine = BatchingGenerator(CausalLM.load(artifact.directory), max_batch_size=4)
    schema = Capital.model_json_schema()
    fmt = ResponseFormat(type="json_schema", schema=json.dumps(schema), name="Capital")
    asked = GenerationRequest(
        prompt="Facts about France as a JSON object (country, capital, population in millions, landlocked, languages):\n",
        max_tokens=96,
        response_format=fmt,
    )
    free = GenerationRequest(prompt="The capital of France is", max_tokens=12, ignore_eos=True)

    async def run() -> tuple[tuple[str, Chunk], tuple[str, Chunk], tuple[str, Chunk]]:
        alone = await answer(engine, free)
        together = await asyncio.gather(answer(engine, asked), answer(engine, free))
        return together[0], together[1], alone

    try:
        (text, last), (free_text, _), (alone_text, _) = asyncio.run(run())
    finally:
        engine.close()
    assert last.finish_reason == "stop", text
    facts = Capital.model_validate_json(text)
    jsonschema.validate(json.loads(text), schema)
    assert "Paris" in facts.capital
    assert free_text == alone_text
