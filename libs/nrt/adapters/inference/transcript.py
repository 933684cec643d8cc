"""A session's text and the token ids that spell it, so the next turn reuses the ids, not a re-tokenization.

Tokenizers are not stable across a generated/decoded boundary: the ids a model generated, once
decoded and tokenized again as part of the next prompt, often come out different (BPE merges
across the old boundary), and a KV cache matched by token ids then loses everything after the
first difference. So a session keeps a :class:`Transcript`: its last turn's prompt text and
answer text as the worker produced them, the ids behind them, and *marks* where the text is
exactly what a prefix of the ids spells. The next prompt is tokenized by :func:`encode_prompt`:
the ids of the longest marked prefix that the prompt's text starts with, then the remaining
suffix tokenized on its own.

Tokenizing the suffix separately can give other ids than tokenizing the whole prompt (a merge
across the cut is lost, e.g. ``"."`` + ``"\\n"`` instead of ``".\\n"``). That is accepted: the ids
still spell the prompt's text exactly, they are just not the canonical split, and they are the
ids the model itself produced for the old part. A tokenizer that changes the text when given a
fragment (one that prepends a space to every input, say) is caught by checking that the suffix's
ids decode, after the reused ids, to the suffix exactly; if not, the whole prompt is tokenized as
before. When the prompt does not extend the transcript at any mark (the client edited the
history), the whole prompt is tokenized too, and the KV cache is matched by token ids as before.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from tokenizers import Tokenizer

Mark = tuple[int, int]  # (tokens, chars): text[:chars] is exactly what ids[:tokens] spell

_CONTEXT = 5  # reused ids decoded before the suffix, to check the suffix's ids in context


@dataclass(frozen=True, slots=True, eq=False)
class Transcript:
    """A finished turn's text and ids (prompt and answer), with the marks where they agree."""

    text: str = field(repr=False)
    ids: tuple[int, ...] = field(repr=False)
    marks: tuple[Mark, ...]  # increasing in both tokens and chars

    def longest_prefix_of(self, prompt: str) -> Mark:
        """The last mark whose text ``prompt`` starts with; ``(0, 0)`` when there is none.

        Marks are nested prefixes, so "``prompt`` starts with the mark's text" holds up to some
        mark and fails after it: a binary search finds it.
        """
        if prompt.startswith(self.text) and self.marks and self.marks[-1][1] == len(self.text):
            return self.marks[-1]
        lo, hi = 0, len(self.marks)  # marks[:lo] hold, marks[hi:] do not
        while lo < hi:
            mid = (lo + hi) // 2
            if prompt.startswith(self.text[: self.marks[mid][1]]):
                lo = mid + 1
            else:
                hi = mid
        return self.marks[lo - 1] if lo else (0, 0)


@dataclass(frozen=True, slots=True)
class EncodedPrompt:
    """A prompt's ids and the marks known inside it (carried over, and the whole prompt)."""

    ids: list[int]
    marks: tuple[Mark, ...]
    reused: int  # ids taken from the session's transcript (0 when the whole prompt was tokenized)


def encode_prompt(
    prompt: str,
    encode: Callable[[str], list[int]],
    tokenizer: Tokenizer,
    previous: Transcript | None = None,
) -> EncodedPrompt:
    """The ids of ``prompt``: the transcript's ids for the part it extends, the rest tokenized alone."""
    tokens, chars = previous.longest_prefix_of(prompt) if previous is not None else (0, 0)
    if previous is not None and tokens > 0:
        reused = list(previous.ids[:tokens])
        suffix = prompt[chars:]
        suffix_ids: list[int] = tokenizer.encode(suffix, add_special_tokens=False).ids if suffix else []
        if _spells(tokenizer, reused[-_CONTEXT:], suffix_ids, suffix):
            ids = reused + suffix_ids
            carried = tuple(m for m in previous.marks if m[0] <= tokens)
            return EncodedPrompt(ids, _close(carried, (len(ids), len(prompt))), tokens)
    ids = encode(prompt)
    return EncodedPrompt(ids, ((len(ids), len(prompt)),), 0)


def _spells(tokenizer: Tokenizer, context: Sequence[int], suffix_ids: Sequence[int], suffix: str) -> bool:
    """Whether ``suffix_ids`` decode to ``suffix`` after ``context`` (specials kept: they are text here)."""
    if not suffix_ids:
        return not suffix
    before: str = tokenizer.decode(list(context), skip_special_tokens=False)
    after: str = tokenizer.decode([*context, *suffix_ids], skip_special_tokens=False)
    return after.startswith(before) and after[len(before) :] == suffix


def _close(marks: tuple[Mark, ...], last: Mark) -> tuple[Mark, ...]:
    return marks if marks and marks[-1] == last else (*marks, last)


class TranscriptRecorder:
    """Follows one generation: the text each generated token adds, marking where text and ids agree.

    A mark goes after a token whose step released text (the detokenizer then holds nothing back),
    and after the last one when the end of generation releases what was held back. Marks say what
    the ids *decode* to: bytes that are not valid UTF-8 read as U+FFFD in the text the client got
    and sends back, and the ids reused for it are the model's own bytes.
    A special token (skipped when decoding, so absent from the text) ends the marking: ids past it
    no longer spell the text alone. The end-of-sequence token never reaches the recorder.
    """

    __slots__ = ("_chars", "_marking", "_marks", "_parts", "_prompt_ids", "_special_ids", "_tokens")

    def __init__(
        self, prompt: str, prompt_ids: Sequence[int], marks: tuple[Mark, ...], special_ids: frozenset[int]
    ) -> None:
        self._prompt_ids = tuple(prompt_ids)
        self._parts = [prompt]
        self._marks = list(marks)
        self._marking = bool(marks) and marks[-1] == (len(prompt_ids), len(prompt))
        self._special_ids = special_ids
        self._tokens: list[int] = []
        self._chars = len(prompt)

    def feed(self, token: int, text: str) -> None:
        """A generated token and the text its detokenizer step released."""
        self._tokens.append(token)
        if not self._marking:
            return
        if token in self._special_ids:
            self._marking = False
            return
        self._mark(text)

    def flush(self, text: str) -> None:
        """The text the detokenizer released at the end (held back until then): it ends at the last token fed."""
        if self._marking:
            self._mark(text)

    def _mark(self, text: str) -> None:
        if text:
            self._parts.append(text)
            self._chars += len(text)
            self._marks.append((len(self._prompt_ids) + len(self._tokens), self._chars))

    def transcript(self) -> Transcript:
        return Transcript("".join(self._parts), self._prompt_ids + tuple(self._tokens), tuple(self._marks))
