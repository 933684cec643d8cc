"""Incremental detokenization: turn a stream of token ids into correct UTF-8 text deltas.

Decoding one token at a time is wrong in two ways: a multi-byte character split across
byte-level tokens decodes to U+FFFD until its last byte arrives, and SentencePiece-style
decoders strip the leading space of the first token of a window. So each step decodes a
small window twice (with and without the new tokens) and emits the difference, holding
back while the window ends in an incomplete character (the approach of TGI and vLLM).
"""

from __future__ import annotations

from collections.abc import Sequence

from tokenizers import Tokenizer

_REPLACEMENT = "\ufffd"
_CONTEXT = 5  # prompt tokens kept as left context for the first generated token


class IncrementalDetokenizer:
    """Feed generated ids one by one; get back the text they add (possibly empty)."""

    __slots__ = ("_prefix", "_read", "_tokenizer", "_tokens")

    def __init__(self, tokenizer: Tokenizer, prompt_ids: Sequence[int] = ()) -> None:
        self._tokenizer = tokenizer
        self._tokens: list[int] = list(prompt_ids[-_CONTEXT:])
        self._prefix = 0
        self._read = len(self._tokens)

    def _decode(self, start: int, stop: int | None = None) -> str:
        text: str = self._tokenizer.decode(self._tokens[start:stop], skip_special_tokens=True)
        return text

    def step(self, token_id: int) -> str:
        """Add one token; return the text that is now final (never a partial character)."""
        self._tokens.append(token_id)
        prefix_text = self._decode(self._prefix, self._read)
        new_text = self._decode(self._prefix)
        if len(new_text) > len(prefix_text) and not new_text.endswith(_REPLACEMENT):
            self._prefix = self._read
            self._read = len(self._tokens)
            return new_text[len(prefix_text) :]
        return ""

    def flush(self) -> str:
        """At the end of generation: whatever is still held back (even if incomplete)."""
        prefix_text = self._decode(self._prefix, self._read)
        new_text = self._decode(self._prefix)
        self._prefix = self._read = len(self._tokens)
        return new_text[len(prefix_text) :] if len(new_text) > len(prefix_text) else ""
