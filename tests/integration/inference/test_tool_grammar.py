"""Tool calls under llguidance on the tiny model's real tokenizer: whatever the logits (random here),
an answer under ``required`` or a named function is calls of the declared functions valid against their
schemas, written so that the gateway's parser reads them back; under ``auto`` free text or such calls."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import numpy as np
import pytest
from tokenizers import Tokenizer

from nrt.adapters.inference.errors import GrammarError
from nrt.adapters.inference.grammar import Grammars, tools_grammar
from nrt.core.protocol import ResponseFormat, ToolChoice, ToolFunction, Tools
from nrt.core.tool_calls import parse_answer

NUMBER = {"type": "integer", "minimum": 0, "maximum": 99}
ADD = {
    "type": "object",
    "properties": {"a": NUMBER, "b": NUMBER},
    "required": ["a", "b"],
    "additionalProperties": False,
}
NOTE = {"type": "object", "properties": {"x": {"type": "string", "maxLength": 5}}, "required": ["x"]}
SCHEMAS = {"add": ADD, "note": NOTE}
FUNCTIONS = tuple(ToolFunction(name=n, parameters=json.dumps(s)) for n, s in SCHEMAS.items())


@pytest.fixture(scope="module")
def grammars(tiny_llama_dir: Path) -> tuple[Grammars, Tokenizer, int]:
    tokenizer = Tokenizer.from_file(str(tiny_llama_dir / "tokenizer.json"))
    eos = 2
    return Grammars(tokenizer, tokenizer.get_vocab_size(), frozenset({eos})), tokenizer, eos


def _walk(grammars: tuple[Grammars, Tokenizer, int], tools: Tools, seed: int, lead: str = "") -> str:
    engine, tokenizer, eos = grammars
    constraint = engine.constraint(None, tools, lead)
    rng = np.random.default_rng(seed)
    out: list[int] = []
    for _ in range(400):
        token = int(np.argmax(constraint.mask(rng.normal(size=engine.vocab_size).astype(np.float32))))
        if token == eos:
            break
        constraint.advance(token)
        out.append(token)
        if constraint.complete:
            break
    text: str = tokenizer.decode(out)
    return text


@pytest.mark.parametrize(("choice", "function", "parallel"), [("required", None, True), ("required", "note", False)])
def test_required_answers_are_valid_calls(
    grammars: tuple[Grammars, Tokenizer, int], choice: ToolChoice, function: str | None, parallel: bool
) -> None:
    tools = Tools(functions=FUNCTIONS, choice=choice, function=function, parallel=parallel)
    for seed in range(6):
        text = _walk(grammars, tools, seed, lead=" ")
        assert text.startswith(" <tool_call>")
        parsed = parse_answer(text)
        assert parsed.text == ""
        assert parsed.calls
        assert parallel or len(parsed.calls) == 1
        for call in parsed.calls:
            if not call.complete:  # cut by the walk's length: only the last one
                assert call is parsed.calls[-1]
                continue
            assert function is None or call.name == function
            jsonschema.validate(json.loads(call.arguments), SCHEMAS[call.name])


def test_auto_answers_text_or_valid_calls(grammars: tuple[Grammars, Tokenizer, int]) -> None:
    tools = Tools(functions=FUNCTIONS, choice="auto")
    for seed in range(6):
        parsed = parse_answer(_walk(grammars, tools, seed))
        assert not parsed.text.lstrip().startswith("<tool_call>")
        for call in parsed.calls:
            if call.complete:
                jsonschema.validate(json.loads(call.arguments), SCHEMAS[call.name])


def test_auto_with_a_response_format_answers_its_json_or_calls(grammars: tuple[Grammars, Tokenizer, int]) -> None:
    engine, tokenizer, eos = grammars
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    answer = ResponseFormat(type="json_schema", schema=json.dumps(schema))
    assert "%json" in tools_grammar(Tools(functions=FUNCTIONS), answer)
    for seed in range(6):
        constraint = engine.constraint(answer, Tools(functions=FUNCTIONS))
        rng, out = np.random.default_rng(seed), []
        while not constraint.complete and len(out) < 400:
            token = int(np.argmax(constraint.mask(rng.normal(size=engine.vocab_size).astype(np.float32))))
            if token == eos:
                break
            constraint.advance(token)
            out.append(token)
        parsed = parse_answer(tokenizer.decode(out))
        if not parsed.calls and len(out) < 400:
            jsonschema.validate(json.loads(parsed.text), schema)


def test_parameters_the_engine_cannot_compile_are_a_grammar_error(grammars: tuple[Grammars, Tokenizer, int]) -> None:
    bad = Tools(functions=(ToolFunction(name="f", parameters='{"type": "object", "not": {}}'),), choice="required")
    with pytest.raises(GrammarError):
        grammars[0].constraint(None, bad)
