"""Transcripts: a session's next prompt takes its last turn's ids where its text extends it."""

from __future__ import annotations

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from nrt.adapters.inference import CausalLM
from nrt.adapters.inference.transcript import Transcript, TranscriptRecorder, encode_prompt

PROMPT = "User: hi\nAssistant:"


def recorded(model: CausalLM, answer: list[tuple[int, str]], special_ids: frozenset[int] = frozenset()) -> Transcript:
    """A turn on PROMPT whose generated (token, released text) pairs are ``answer``."""
    first = encode_prompt(PROMPT, model.encode, model.tokenizer)
    recorder = TranscriptRecorder(PROMPT, first.ids, first.marks, special_ids)
    for token, text in answer:
        recorder.feed(token, text)
    return recorder.transcript()


def test_the_text_that_extends_a_turn_runs_on_its_ids_and_the_rest_is_tokenized_alone(tiny_llama: CausalLM) -> None:
    answer = [(300, " he"), (301, "llo"), (302, "")]  # the last released nothing: not marked
    transcript = recorded(tiny_llama, answer)
    prompt_ids = tiny_llama.encode(PROMPT)
    prompt = PROMPT + " hello\nUser: more\nAssistant:"
    encoded = encode_prompt(prompt, tiny_llama.encode, tiny_llama.tokenizer, transcript)
    suffix = tiny_llama.tokenizer.encode("\nUser: more\nAssistant:", add_special_tokens=False).ids
    assert encoded.ids == [*prompt_ids, 300, 301, *suffix]
    assert encoded.reused == len(prompt_ids) + 2
    assert encoded.marks[-1] == (len(encoded.ids), len(prompt))


def test_an_edit_reuses_up_to_the_last_mark_before_it_and_one_in_the_prompt_nothing(tiny_llama: CausalLM) -> None:
    transcript = recorded(tiny_llama, [(300, " he"), (301, "llo")])
    prompt_ids = tiny_llama.encode(PROMPT)
    edited_answer = encode_prompt(PROMPT + " help", tiny_llama.encode, tiny_llama.tokenizer, transcript)
    assert edited_answer.reused == len(prompt_ids) + 1
    edited_prompt = "User: ho\nAssistant: hello"
    whole = encode_prompt(edited_prompt, tiny_llama.encode, tiny_llama.tokenizer, transcript)
    assert whole.reused == 0
    assert whole.ids == tiny_llama.encode(edited_prompt)


def test_a_special_token_ends_the_marks(tiny_llama: CausalLM) -> None:
    transcript = recorded(tiny_llama, [(300, " he"), (2, ""), (301, "llo")], special_ids=frozenset({2}))
    encoded = encode_prompt(PROMPT + " hello", tiny_llama.encode, tiny_llama.tokenizer, transcript)
    assert encoded.reused == len(tiny_llama.encode(PROMPT)) + 1  # " he", not the special token after it


def test_a_tokenizer_that_changes_a_fragment_gets_the_whole_prompt_tokenized() -> None:
    """A SentencePiece-style tokenizer that prepends a space to any input would insert one at the cut."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="always")
    tok.decoder = decoders.Metaspace(prepend_scheme="always")
    tok.train_from_iterator(["hello there\nmore text"] * 10, trainers.BpeTrainer(vocab_size=60, show_progress=False))

    def encode(text: str) -> list[int]:
        ids: list[int] = tok.encode(text).ids
        return ids

    first = encode_prompt("hello", encode, tok)
    transcript = TranscriptRecorder("hello", first.ids, first.marks, frozenset()).transcript()
    encoded = encode_prompt("hello\nmore", encode, tok, transcript)
    assert encoded.reused == 0
    assert encoded.ids == encode("hello\nmore")
