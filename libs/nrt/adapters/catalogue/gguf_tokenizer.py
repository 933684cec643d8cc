"""A GGUF file's tokenizer (``tokenizer.ggml.*``) as Hugging Face tokenizer files, as llama.cpp tokenizes.

Two kinds, as llama.cpp names them:

* ``gpt2``: a byte-level BPE (Llama 3, Qwen, SmolLM...): the vocabulary and merges as stored, the
  text split first by the pre-tokenizer ``tokenizer.ggml.pre`` names (llama.cpp's regular
  expressions, per family), then mapped to bytes;
* ``llama``: a SentencePiece BPE (Llama 2, Mistral, Phi-3, Gemma): rebuilt from the pieces and
  their scores by :mod:`nrt.adapters.catalogue.spm_tokenizer`, with llama.cpp's leading space
  unless ``tokenizer.ggml.add_space_prefix`` is false (Gemma).

Control tokens are special tokens, user-defined ones are matched whole. transformers' own GGUF
tokenizer conversion is keyed by the model's architecture rather than by the tokenizer, hard-codes
some families' special tokens and swaps Llama's BOS and EOS, so it is not used. The end of a turn is
every id llama.cpp stops at: ``eos``, ``eot``, ``eom`` and the control tokens it recognises by text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tokenizers import AddedToken, Regex, Tokenizer, decoders, pre_tokenizers, processors
from tokenizers.models import BPE

from nrt.adapters.catalogue.gguf_header import GgufHeader
from nrt.adapters.catalogue.spm_tokenizer import CONTROL, NORMAL, UNKNOWN, USER_DEFINED, SpmVocab, build_tokenizer
from nrt.adapters.inference.errors import ArtifactError

_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
_LLAMA3 = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
_QWEN2 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# tokenizer.ggml.pre -> (split each digit apart first, the regular expression); llama.cpp's families
PRE_TOKENIZERS: dict[str, tuple[bool, str]] = {
    "default": (False, _GPT2),
    "gpt-2": (False, _GPT2),
    "llama-bpe": (False, _LLAMA3),
    "llama3": (False, _LLAMA3),
    "llama-v3": (False, _LLAMA3),
    "falcon3": (False, _LLAMA3),
    "pixtral": (False, _LLAMA3),
    "qwen2": (False, _QWEN2),
    "deepseek-r1-qwen": (False, _QWEN2),
    "smollm": (True, _GPT2),
    "starcoder": (True, _GPT2),
    "refact": (True, _GPT2),
}
_IGNORE_MERGES = {"llama-bpe", "llama3", "llama-v3", "falcon3", "pixtral"}  # a whole-word token wins (llama.cpp)
# control tokens llama.cpp ends a turn at, by their text (llama-vocab.cpp)
END_OF_TURN = (
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "<｜end▁of▁sentence｜>",
)


@dataclass(frozen=True)
class GgufTokenizer:
    tokenizer: Tokenizer
    config: dict[str, Any]  # tokenizer_config.json: special tokens' texts, the chat template
    end_of_turn: tuple[int, ...]  # generation_config.json's eos_token_id: the ids generation stops at


def gguf_tokenizer(header: GgufHeader, context_length: int | None = None) -> GgufTokenizer:
    """The tokenizer stored in ``header``; :class:`ArtifactError` for a kind llama.cpp has that NRT does not."""
    fields = header.fields
    model = str(fields.get("tokenizer.ggml.model") or "")
    tokens: list[str] = list(fields.get("tokenizer.ggml.tokens") or [])
    if not tokens:
        raise ArtifactError(f"{header.path}: the GGUF holds no tokenizer (tokenizer.ggml.tokens)")
    types = [int(kind) for kind in fields.get("tokenizer.ggml.token_type") or [NORMAL] * len(tokens)]
    if len(types) != len(tokens):
        raise ArtifactError(f"{header.path}: {len(tokens)} tokens but {len(types)} token types")
    bos, eos = _id(fields, "bos_token_id"), _id(fields, "eos_token_id")
    if model == "gpt2":
        pre = str(fields.get("tokenizer.ggml.pre") or "default")
        add_bos = bool(fields.get("tokenizer.ggml.add_bos_token", pre in _IGNORE_MERGES))
        tokenizer = _byte_level(header, tokens, types, pre)
    elif model == "llama":
        add_bos = bool(fields.get("tokenizer.ggml.add_bos_token", True))
        tokenizer = _sentencepiece(header, tokens, types, add_bos)
    else:
        raise ArtifactError(
            f"{header.path}: tokenizer kind {model or '(none)'!r} is not supported (gpt2: byte-level BPE; "
            f"llama: SentencePiece)"
        )
    add_eos = bool(fields.get("tokenizer.ggml.add_eos_token", False))
    _add_specials(tokenizer, tokens, bos if add_bos else None, eos if add_eos else None)
    config: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "add_bos_token": add_bos,
        "add_eos_token": add_eos,
        "clean_up_tokenization_spaces": False,
    }
    for name, token in (("bos", bos), ("eos", eos), ("unk", _id(fields, "unknown_token_id")), ("pad", _pad(fields))):
        if token is not None and 0 <= token < len(tokens):
            config[f"{name}_token"] = tokens[token]
    if context_length:
        config["model_max_length"] = context_length
    template = fields.get("tokenizer.chat_template")
    if isinstance(template, str) and template:
        config["chat_template"] = template
    return GgufTokenizer(tokenizer, config, _end_of_turn(fields, tokens, types, eos))


def _id(fields: dict[str, Any], key: str) -> int | None:
    value = fields.get(f"tokenizer.ggml.{key}")
    return None if value is None else int(value)


def _pad(fields: dict[str, Any]) -> int | None:
    return _id(fields, "padding_token_id")


def _byte_level(header: GgufHeader, tokens: list[str], types: list[int], pre: str) -> Tokenizer:
    if pre not in PRE_TOKENIZERS:
        raise ArtifactError(
            f"{header.path}: pre-tokenizer {pre!r} (tokenizer.ggml.pre) is not supported; supported are "
            f"{', '.join(PRE_TOKENIZERS)}"
        )
    merges = [_merge(header, text) for text in header.fields.get("tokenizer.ggml.merges") or []]
    vocab: dict[str, int] = {}
    for index, token in enumerate(tokens):
        vocab.setdefault(token, index)
    try:
        tokenizer = Tokenizer(BPE(vocab=vocab, merges=merges, ignore_merges=pre in _IGNORE_MERGES))
    except Exception as exc:  # the tokenizers library raises a bare Exception for an inconsistent vocabulary
        raise ArtifactError(f"{header.path}: its BPE vocabulary and merges do not fit together ({exc})") from None
    digits, pattern = PRE_TOKENIZERS[pre]
    steps: list[Any] = [pre_tokenizers.Digits(individual_digits=True)] if digits else []
    steps.append(pre_tokenizers.Split(Regex(pattern), behavior="isolated"))
    steps.append(pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(steps)
    tokenizer.decoder = decoders.ByteLevel()
    kinds = list(zip(tokens, types, strict=True))
    tokenizer.add_tokens(
        [AddedToken(token, special=False, normalized=False) for token, k in kinds if k == USER_DEFINED]
    )
    tokenizer.add_special_tokens(
        [AddedToken(token, special=True, normalized=False) for token, k in kinds if k == CONTROL]
    )
    return tokenizer


def _merge(header: GgufHeader, text: str) -> tuple[str, str]:
    left, space, right = text.partition(" ")
    if not space or not left or not right:
        raise ArtifactError(f"{header.path}: merge {text!r} is not two tokens apart by a space")
    return left, right


def _sentencepiece(header: GgufHeader, tokens: list[str], types: list[int], add_bos: bool) -> Tokenizer:
    fields = header.fields
    scores = fields.get("tokenizer.ggml.scores")
    if not scores or len(scores) != len(tokens):
        raise ArtifactError(f"{header.path}: a SentencePiece tokenizer needs one score and type per token")
    unknown = _id(fields, "unknown_token_id")
    vocab = SpmVocab(
        tokens=tuple(tokens),
        scores=tuple(float(score) for score in scores),
        types=tuple(types),
        bos_token_id=_id(fields, "bos_token_id") or 0,
        eos_token_id=_id(fields, "eos_token_id") or 0,
        unknown_token_id=unknown if unknown is not None else next((i for i, k in enumerate(types) if k == UNKNOWN), 0),
        padding_token_id=_pad(fields),
        add_bos_token=False,  # the post-processor is added with the end-of-sequence token, when there is one
        add_space_prefix=bool(fields.get("tokenizer.ggml.add_space_prefix", True)),
    )
    return build_tokenizer(vocab)


def _add_specials(tokenizer: Tokenizer, tokens: list[str], bos: int | None, eos: int | None) -> None:
    if bos is None and eos is None:
        return
    single = " ".join([*([tokens[bos]] if bos is not None else []), "$A", *([tokens[eos]] if eos is not None else [])])
    pair = single.replace("$A", "$A $B") if eos is None else f"{single} $B {tokens[eos]}"
    ids = {tokens[token]: token for token in (bos, eos) if token is not None}
    tokenizer.post_processor = processors.TemplateProcessing(single=single, pair=pair, special_tokens=list(ids.items()))


def _end_of_turn(fields: dict[str, Any], tokens: list[str], types: list[int], eos: int | None) -> tuple[int, ...]:
    ids = [token for token in (eos, _id(fields, "eot_token_id"), _id(fields, "eom_token_id")) if token is not None]
    ids += [index for index, token in enumerate(tokens) if token in END_OF_TURN and types[index] == CONTROL]
    return tuple(dict.fromkeys(ids))
