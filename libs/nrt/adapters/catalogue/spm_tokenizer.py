"""Rebuild a SentencePiece-BPE tokenizer (Gemma 3 style, or Llama 2 style) from a GGUF vocabulary.

transformers 4.57 turns the Gemma 3 GGUF vocabulary into a Unigram tokenizer, which splits
words differently from the model's real tokenizer. The real one is SentencePiece BPE:

* spaces become ``▁`` (no pre-tokenizer split, no added prefix space);
* user-defined and control pieces (``<start_of_turn>``, newline and tab runs, ``▁▁``...)
  are matched whole before BPE;
* BPE merges adjacent symbols, always taking the pair whose merged piece has the highest
  score (GGUF stores the piece scores, not merges, so merges are derived from them);
* characters outside the vocabulary fall back to ``<0xXX>`` byte pieces.

The GGUF converter (llama.cpp) rewrote ``▁`` as a space inside user-defined pieces; they
are restored here so that they match the normalised text.

Llama 2 style (``add_space_prefix``, llama.cpp's default for SentencePiece): a ``▁`` is put before
the text, and before the text after each special token, as SentencePiece's dummy prefix; decoding
strips it again.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
from tokenizers import AddedToken, Tokenizer, decoders, normalizers, processors
from tokenizers.models import BPE

SPACE = "\u2581"  # ▁

# SentencePiece / GGUF token types
NORMAL = 1
UNKNOWN = 2
CONTROL = 3
USER_DEFINED = 4
UNUSED = 5
BYTE = 6


class SpmVocab(msgspec.Struct, frozen=True):
    """A SentencePiece vocabulary as GGUF stores it (``tokenizer.ggml.*``)."""

    tokens: tuple[str, ...]
    scores: tuple[float, ...]
    types: tuple[int, ...]
    bos_token_id: int
    eos_token_id: int
    unknown_token_id: int
    padding_token_id: int | None
    add_bos_token: bool
    add_space_prefix: bool = False  # Gemma: none; Llama 2, Mistral, Phi-3: a leading ``▁``

    def __post_init__(self) -> None:
        if not len(self.tokens) == len(self.scores) == len(self.types):
            raise ValueError("tokens, scores and types must have one entry per token")


def pieces(vocab: SpmVocab) -> list[str]:
    """The vocabulary's pieces as SentencePiece spells them (``▁`` for spaces everywhere)."""
    return [
        token.replace(" ", SPACE) if kind == USER_DEFINED else token
        for token, kind in zip(vocab.tokens, vocab.types, strict=True)
    ]


def derive_merges(vocab: SpmVocab) -> list[tuple[str, str]]:
    """BPE merges that reproduce SentencePiece's highest-score-first merging.

    Every normal piece that splits into two normal pieces yields a merge, ranked by the
    merged piece's score (highest first), then by the ids of the halves.
    """
    spelled = pieces(vocab)
    ids = {piece: index for index, piece in enumerate(spelled)}
    normal = {piece for piece, kind in zip(spelled, vocab.types, strict=True) if kind == NORMAL}
    ranked: list[tuple[float, int, int, int, str, str]] = []
    for piece in normal:
        merged_id = ids[piece]
        score = vocab.scores[merged_id]
        for cut in range(1, len(piece)):
            left, right = piece[:cut], piece[cut:]
            if left in normal and right in normal:
                ranked.append((-score, merged_id, ids[left], ids[right], left, right))
    ranked.sort()
    return [(left, right) for *_, left, right in ranked]


def build_tokenizer(vocab: SpmVocab) -> Tokenizer:
    """A ``tokenizers`` BPE tokenizer equivalent to the SentencePiece model of ``vocab``."""
    spelled = pieces(vocab)
    model = BPE(
        vocab={piece: index for index, piece in enumerate(spelled)},
        merges=derive_merges(vocab),
        unk_token=spelled[vocab.unknown_token_id],
        fuse_unk=True,
        byte_fallback=True,
    )
    tokenizer = Tokenizer(model)
    replace = normalizers.Replace(" ", SPACE)
    tokenizer.normalizer = (
        normalizers.Sequence([normalizers.Prepend(SPACE), replace]) if vocab.add_space_prefix else replace
    )
    tokenizer.pre_tokenizer = None
    steps = [decoders.Replace(SPACE, " "), decoders.ByteFallback(), decoders.Fuse()]
    if vocab.add_space_prefix:
        steps.append(decoders.Strip(" ", 1, 0))
    tokenizer.decoder = decoders.Sequence(steps)
    # Added tokens are matched before BPE. Control pieces are "special" (skipped when decoding
    # with skip_special_tokens); user-defined pieces are ordinary text.
    tokenizer.add_tokens(
        [
            AddedToken(piece, special=False, normalized=True)
            for piece, kind in zip(spelled, vocab.types, strict=True)
            if kind == USER_DEFINED
        ]
    )
    tokenizer.add_special_tokens(
        [
            AddedToken(piece, special=True, normalized=False)
            for piece, kind in zip(spelled, vocab.types, strict=True)
            if kind in (CONTROL, UNKNOWN)
        ]
    )
    if vocab.add_bos_token:
        bos = spelled[vocab.bos_token_id]
        tokenizer.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A $B", special_tokens=[(bos, vocab.bos_token_id)]
        )
    return tokenizer


def check_tokenizer(tokenizer: Tokenizer, expectations: Sequence[tuple[str, Sequence[int]]]) -> None:
    """Raise ``ValueError`` unless each text encodes to exactly its expected ids."""
    for text, expected in expectations:
        got = tokenizer.encode(text).ids
        if got != list(expected):
            raise ValueError(f"tokenizer check failed for {text!r}: got {got}, expected {list(expected)}")
