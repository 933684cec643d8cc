"""Structured outputs: a response format compiled by llguidance into a grammar that masks logits.

- :class:`Grammars` (one per model) builds llguidance's view of the model's tokenizer from its
  ``tokenizer.json`` once (seconds for a 262k vocabulary: lazily, on the first constrained request,
  off the scheduler thread), compiles each response format once (an LRU of ``capacity`` schemas)
  and hands every request its own copy of the compiled matcher.
- :class:`Constraint` (one per request) masks a row of logits before the sampler sees it, advances
  with each token chosen, and says when the grammar is complete (the answer ends there).

llguidance was chosen over xgrammar by measurement (compile time of a medium schema, per-token mask
time, at the tiny model's and Gemma's vocabularies): xgrammar masks faster, but compiles each new
schema for seconds at Gemma's vocabulary (every new schema would stall its request's first token
that long), where llguidance compiles lazily in milliseconds and masks in microseconds; and
llguidance reads a ``tokenizers`` JSON itself and needs nothing else, where xgrammar needs
transformers and torch at run time, which the worker never loads.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import llguidance
import llguidance.numpy
import numpy as np
import numpy.typing as npt
from tokenizers import Tokenizer

from nrt.adapters.inference.errors import GrammarError
from nrt.core.protocol import ResponseFormat, Tools
from nrt.core.tool_calls import CALL_OPEN, CALL_SEPARATOR

if TYPE_CHECKING:
    from llguidance._lib import JsonCompileOptions  # a TypedDict of the stub only

DEFAULT_CAPACITY = 64  # compiled schemas kept per model
# JSON as people (and models) write it: one space after ':' and ',', no other whitespace. Flexible
# whitespace would let a weak model pad forever; a fixed layout bounds the answer by its content.
JSON_OPTIONS: JsonCompileOptions = {"item_separator": ", ", "key_separator": ": ", "whitespace_flexible": False}
ANY_OBJECT = '{"type": "object"}'  # json_object: any JSON object
_NEG_INF_BITS = np.uint32(0xFF800000)  # float32 -inf, as its bits


def grammar_text(response_format: ResponseFormat) -> str:
    """llguidance's grammar for a response format; raises :class:`GrammarError` naming the problem."""
    schema = ANY_OBJECT if response_format.type == "json_object" else response_format.schema
    if schema is None:
        raise GrammarError("response_format json_schema needs a schema")
    try:
        grammar = llguidance.LLMatcher.grammar_from_json_schema(schema, overrides=JSON_OPTIONS)
    except ValueError as exc:
        raise GrammarError(f"the JSON schema is not a JSON object: {exc}") from exc
    is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(grammar)
    if is_error:
        raise GrammarError(f"the JSON schema cannot be compiled: {_first_line(messages)}")
    return grammar


# free text that does not open a tool call (auto); the answer's one alternative to calls
_FREE_TEXT = r"/\s*(([^<\s]|<[^t]|<t[^o])(.|\n)*)?/"
_X_GUIDANCE = {"item_separator": ", ", "key_separator": ": ", "whitespace_flexible": False}


def tools_grammar(tools: Tools, response_format: ResponseFormat | None = None, lead: str = "") -> str:
    """llguidance's Lark grammar for an answer under ``tools`` (``nrt.core.tool_calls`` writes the format).

    A call is ``<tool_call>`` then the JSON object ``{"name": ..., "arguments": ...}``: an anyOf over the
    declared functions, each its name as a constant and its parameters' schema. ``required`` (or a named
    function): calls only; ``auto``: free text (or, with a response format, the JSON it asks for) or calls.
    ``lead``: the whitespace the prompt template puts between its cue and an answer (the ``" "`` of
    ``Assistant: {content}`` after the cue ``Assistant:``), written before the calls, so that the next
    turn's prompt, which shows them so, extends this one's text (and a session's KV cache is reused).
    Raises :class:`GrammarError` naming the problem."""
    functions = [f for f in tools.functions if tools.function is None or f.name == tools.function]
    if not functions:
        raise GrammarError(f"tool_choice names the function {tools.function!r}, which the request does not declare")
    choices = [_call_schema(f.name, f.parameters) for f in functions]
    call_schema = {"anyOf": choices, "x-guidance": _X_GUIDANCE} if len(choices) > 1 else choices[0]
    lines = [
        "%llguidance {}",
        "start: calls" if tools.choice == "required" else "start: answer | calls",
        f"calls: {json.dumps(lead)} call_list" if lead else "calls: call_list",
        f"call_list: call ({json.dumps(CALL_SEPARATOR)} call)*" if tools.parallel else "call_list: call",
        f"call: {json.dumps(CALL_OPEN)} arguments",
        f"arguments: %json {json.dumps(call_schema)}",
    ]
    if tools.choice != "required":
        if response_format is None:
            lines.append(f"answer: {_FREE_TEXT}")
        else:
            schema = ANY_OBJECT if response_format.type == "json_object" else response_format.schema
            lines.append(f"answer: %json {json.dumps(_with_layout(_decoded(schema or ANY_OBJECT)))}")
    grammar = llguidance.grammar_from("lark", "\n".join(lines))
    is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(grammar)
    if is_error:
        raise GrammarError(f"the tools' parameters cannot be compiled: {_first_line(messages)}")
    return grammar


def _call_schema(name: str, parameters: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"name": {"const": name}, "arguments": _decoded(parameters)},
        "required": ["name", "arguments"],
        "additionalProperties": False,
        "x-guidance": _X_GUIDANCE,
    }


def _decoded(schema: str) -> Any:
    try:
        return json.loads(schema)
    except ValueError as exc:
        raise GrammarError(f"a JSON schema is not JSON: {exc}") from exc


def _with_layout(schema: Any) -> Any:
    return {**schema, "x-guidance": _X_GUIDANCE} if isinstance(schema, dict) else schema


class Constraint:
    """One request's grammar state: masks its logits, follows its tokens."""

    __slots__ = ("_bias", "_bits", "_matcher", "_ready", "vocab_size")

    def __init__(self, matcher: llguidance.LLMatcher, vocab_size: int) -> None:
        self._matcher = matcher
        self.vocab_size = vocab_size
        self._bits = llguidance.numpy.allocate_token_bitmask(1, vocab_size)
        self._bias = np.zeros(vocab_size, dtype=np.uint32)  # as float32: 0.0 (allowed) or -inf (forbidden)
        self._ready = False  # ``_bias`` holds the next token's mask

    def prepare(self) -> None:
        """Compute the next token's mask ahead of :meth:`mask`. llguidance releases the GIL meanwhile:
        the scheduler runs this on another thread while the model computes the logits."""
        llguidance.numpy.fill_next_token_bitmask(self._matcher, self._bits)
        allowed = np.unpackbits(self._bits.view(np.uint8), count=self.vocab_size, bitorder="little")
        # (1 - allowed) * the bits of -inf: a float32 bias of 0.0 or -inf, three times as fast as np.where
        np.subtract(np.uint32(1), allowed, out=self._bias, dtype=np.uint32)
        np.multiply(self._bias, _NEG_INF_BITS, out=self._bias)
        self._ready = True

    def mask(self, logits: npt.NDArray[np.floating]) -> npt.NDArray[np.float32]:
        """A copy of one row of logits (``[vocab]``, the model's vocabulary: ``vocab_size``) with every
        token the grammar forbids next at -inf."""
        if not self._ready:
            self.prepare()
        self._ready = False
        if self._matcher.is_error():
            raise GrammarError(f"the response format's grammar failed: {self._matcher.get_error()}")
        masked: npt.NDArray[np.float32] = np.add(logits, self._bias.view(np.float32), dtype=np.float32)
        return masked

    def advance(self, token: int) -> None:
        """Follow the token chosen (it was allowed by :meth:`mask`)."""
        self._ready = False
        if not self._matcher.consume_token(token):
            raise GrammarError(f"token {token} breaks the response format: {self._matcher.get_error()}")

    @property
    def complete(self) -> bool:
        """The grammar is satisfied and admits nothing more: the answer ends here."""
        return self._matcher.is_stopped()


def prepare_all(constraints: list[Constraint]) -> None:
    """Compute each constraint's next mask (see :meth:`Constraint.prepare`)."""
    for constraint in constraints:
        constraint.prepare()


class Grammars:
    """One model's compiled response formats, for its requests' constraints. Thread-safe."""

    def __init__(
        self, tokenizer: Tokenizer, vocab_size: int, eos_ids: frozenset[int], capacity: int = DEFAULT_CAPACITY
    ) -> None:
        self.vocab_size = vocab_size
        self.capacity = max(1, capacity)
        self._source = tokenizer
        self._eos = sorted(eos_ids)
        self._lock = threading.Lock()
        self._tokenizer: llguidance.LLTokenizer | None = None
        self._compiled: OrderedDict[tuple[str, str | None], llguidance.LLMatcher] = OrderedDict()
        self.compiled = 0  # schemas compiled so far (cache misses)

    def constraint(
        self, response_format: ResponseFormat | None, tools: Tools | None = None, lead: str = ""
    ) -> Constraint:
        """A fresh constraint for one request: its response format, or its tools' calls (with the format
        for a text answer). Blocking (a first call compiles): run it off the event loop."""
        if tools is not None and tools.choice != "none":
            grammar = tools_grammar(tools, response_format, lead)
            return Constraint(self._matcher(("tools", grammar), lambda: grammar).deep_copy(), self.vocab_size)
        if response_format is None:
            raise GrammarError("no response format or tools to constrain the answer to")
        key = (response_format.type, response_format.schema)
        return Constraint(self._matcher(key, lambda: grammar_text(response_format)).deep_copy(), self.vocab_size)

    def __len__(self) -> int:
        with self._lock:
            return len(self._compiled)

    def _matcher(self, key: tuple[str, str | None], build: Callable[[], str]) -> llguidance.LLMatcher:
        with self._lock:
            found = self._compiled.get(key)
            if found is not None:
                self._compiled.move_to_end(key)
                return found
        grammar = build()
        matcher = llguidance.LLMatcher(self._llg_tokenizer(), grammar, log_level=0)
        if matcher.is_error():
            raise GrammarError(f"the JSON schema cannot be compiled: {_first_line([matcher.get_error()])}")
        matcher.compute_bitmask()  # builds the lexer's first states once, for every copy
        with self._lock:
            self._compiled[key] = matcher
            self.compiled += 1
            while len(self._compiled) > self.capacity:
                self._compiled.popitem(last=False)
        return matcher

    def _llg_tokenizer(self) -> llguidance.LLTokenizer:
        with self._lock:
            if self._tokenizer is None:
                self._tokenizer = llguidance.LLTokenizer(
                    self._source.to_str(), n_vocab=self.vocab_size, eos_token=self._eos or None
                )
            return self._tokenizer


def _first_line(messages: list[str]) -> str:
    text = next((m for m in messages if m), "unknown error").strip()
    return text.splitlines()[0] if text else "unknown error"
