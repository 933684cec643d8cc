"""OpenAI's ``logprobs`` / ``top_logprobs`` for one request: the chosen token's log-probability and the
most likely alternatives, one entry per generated token.

Read from the distribution the model offers this request: the log-softmax of the row's logits after
``logit_bias`` and the presence / frequency penalties (they are part of what the client asked the
model for), before the response format's mask and before temperature, top-k and top-p (which shape
how the sampler draws, not what the model says). Cheap: one pass of numpy over the row, and a
partial sort for the top alternatives only.
"""

from __future__ import annotations

import re

import numpy as np
import numpy.typing as npt
from tokenizers import Tokenizer, decoders

from nrt.core.protocol import TokenLogprob, TopLogprob

MAX_TOP_LOGPROBS = 20  # OpenAI's bound
_MARGINS = (8.0, 16.0)  # logits below the peak searched for the top alternatives before the whole row
_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")  # SentencePiece's byte fallback (Gemma, Llama 2)


def _byte_level_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet, reversed: the character a byte-level vocabulary writes for each byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = {b: b for b in printable}, 0
    for b in range(256):
        if b not in chars:
            chars[b] = 256 + extra
            extra += 1
    return {chr(c): b for b, c in chars.items()}


_BYTE_LEVEL = _byte_level_decoder()


def _top_ids(row: npt.NDArray[np.float32], peak: float, k: int) -> npt.NDArray[np.intp]:
    """The ``k`` highest logits' ids, highest first. Exact, without partitioning the whole vocabulary in the
    usual case: every token within ``margin`` of the peak outranks every token outside, so when at
    least ``k`` lie within it, the top ``k`` are among them."""
    candidates = np.arange(row.shape[0])
    for margin in _MARGINS:
        near = np.flatnonzero(row >= np.float32(peak - margin))
        if near.size >= k:
            candidates = near
            break
    if candidates.size > k:
        candidates = candidates[np.argpartition(row[candidates], -k)[-k:]]
    ordered: npt.NDArray[np.intp] = candidates[np.argsort(-row[candidates], kind="stable")]
    return ordered


class LogprobRecorder:
    """Turns the row a token was chosen from into its :class:`TokenLogprob`."""

    __slots__ = ("_byte_level", "_pieces", "_tokenizer", "top")

    def __init__(self, tokenizer: Tokenizer, top: int) -> None:
        self._tokenizer = tokenizer
        self._byte_level = isinstance(tokenizer.decoder, decoders.ByteLevel)
        self.top = max(0, min(int(top), MAX_TOP_LOGPROBS))
        self._pieces: dict[int, TopLogprob] = {}  # token id -> its text and bytes, logprob 0 (a template)

    def entry(self, logits: npt.NDArray[np.floating], token: int) -> TokenLogprob:
        """The chosen ``token``'s log-probability in ``logits`` (one row, ``[vocab]``), with the top alternatives."""
        row = np.asarray(logits, dtype=np.float32)
        peak = row.max()
        shifted = row - peak
        np.exp(shifted, out=shifted)
        log_total = float(peak) + float(np.log(shifted.sum(dtype=np.float64)))
        top: tuple[TopLogprob, ...] = ()
        if self.top:
            ids = _top_ids(row, float(peak), min(self.top, row.shape[0]))
            top = tuple(self._scored(i, float(row[i]) - log_total) for i in ids.tolist())
        piece = self._piece(token)
        return TokenLogprob(
            token=piece.token, logprob=float(row[token]) - log_total, bytes=piece.bytes, top_logprobs=top
        )

    def _scored(self, token: int, logprob: float) -> TopLogprob:
        piece = self._piece(token)
        return TopLogprob(token=piece.token, logprob=logprob, bytes=piece.bytes)

    def _piece(self, token: int) -> TopLogprob:
        piece = self._pieces.get(token)
        if piece is None:
            text = self._tokenizer.decode([token], skip_special_tokens=True)  # as the answer's text has it
            piece = self._pieces[token] = TopLogprob(token=text, logprob=0.0, bytes=self._bytes(token, text))
        return piece

    def _bytes(self, token: int, text: str) -> tuple[int, ...]:
        """The token's own bytes: a piece of a character (shown as U+FFFD in ``text``) has its raw byte(s),
        so that a client joining the bytes gets the answer's UTF-8."""
        if not text:
            return ()  # a special token: no text in the answer
        piece = self._tokenizer.id_to_token(token) or ""
        if self._byte_level and piece and all(c in _BYTE_LEVEL for c in piece):
            return tuple(_BYTE_LEVEL[c] for c in piece)
        byte = _BYTE_PIECE.fullmatch(piece)
        if byte is not None:
            return (int(byte.group(1), 16),)
        return tuple(text.encode("utf-8"))
