"""A byte-level BPE tokenizer with no merges: every UTF-8 byte is one token.

Small (259 ids) and total: any text round-trips exactly, and a model that emits arbitrary
bytes exercises the incremental UTF-8 decoding a streaming server must get right.
"""

from __future__ import annotations

from tokenizers import AddedToken, Tokenizer, decoders, pre_tokenizers, processors
from tokenizers.models import BPE

SPECIAL_TOKENS = ("<pad>", "<bos>", "<eos>")


def byte_to_unicode() -> dict[int, str]:
    """GPT-2's reversible mapping of the 256 byte values to printable characters."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    mapping: dict[int, str] = {}
    shift = 0
    for byte in range(256):
        if byte in printable:
            mapping[byte] = chr(byte)
        else:
            mapping[byte] = chr(256 + shift)
            shift += 1
    return mapping


def byte_level_tokenizer(add_bos: bool = True) -> Tokenizer:
    """Ids 0-2 are ``<pad> <bos> <eos>``; id ``3 + b`` is byte ``b``. ``encode`` adds ``<bos>`` when ``add_bos``."""
    vocab = {token: index for index, token in enumerate(SPECIAL_TOKENS)}
    for byte, char in byte_to_unicode().items():
        vocab[char] = len(SPECIAL_TOKENS) + byte
    tokenizer = Tokenizer(BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens([AddedToken(token, special=True, normalized=False) for token in SPECIAL_TOKENS])
    if add_bos:
        tokenizer.post_processor = processors.TemplateProcessing(
            single="<bos> $A", pair="<bos> $A $B", special_tokens=[("<bos>", SPECIAL_TOKENS.index("<bos>"))]
        )
    return tokenizer
