"""Streaming text: UTF-8-safe incremental detokenization and held-back stop sequences."""

from __future__ import annotations

from nrt.adapters.inference import (
    BatchingGenerator,
    CausalLM,
    Chunk,
    GenerationRequest,
    IncrementalDetokenizer,
    StopMatcher,
)

MULTIBYTE = "héllo 日本語のテキスト 🎉🚀 ça va? ÷×"


def test_multibyte_characters_split_across_tokens_stream_cleanly(tiny_llama: CausalLM) -> None:
    tokenizer = tiny_llama.tokenizer
    ids = tiny_llama.encode(MULTIBYTE, add_special_tokens=False)
    # The byte-level tokenizer really splits characters: a lone token decodes to U+FFFD.
    assert any("\ufffd" in tokenizer.decode([i]) for i in ids)
    detok = IncrementalDetokenizer(tokenizer, tiny_llama.encode("Prompt:"))
    deltas = [detok.step(i) for i in ids]
    deltas.append(detok.flush())
    assert all("\ufffd" not in d for d in deltas)
    assert "".join(deltas) == MULTIBYTE
    assert sum(1 for d in deltas if d == "") > 0  # some steps held back a partial character


def test_flush_releases_an_incomplete_tail() -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    vocab = {c: i for i, c in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    ids = tokenizer.encode("a🎉").ids  # 'a' + 4 bytes
    detok = IncrementalDetokenizer(tokenizer)
    out = [detok.step(i) for i in ids[:-1]]  # stop one byte short of the emoji
    assert "".join(out) == "a"
    assert detok.flush() == "\ufffd"


def test_stop_matcher_holds_back_possible_starts() -> None:
    stops = StopMatcher(["World", "\nUser:"])
    assert stops.feed("Hello Wo") == "Hello "
    assert stops.feed("r") == ""
    assert stops.feed("ld and more") == ""
    assert stops.stopped
    assert stops.matched == "World"
    assert stops.flush() == ""


def test_stop_matcher_releases_text_that_stops_matching() -> None:
    stops = StopMatcher(["\nUser:"])
    assert stops.feed("a\nUs") == "a"
    assert stops.feed("ed car") == "\nUsed car"
    assert stops.feed("\n") == ""
    assert stops.flush() == "\n"
    assert not stops.stopped
    assert stops.matched is None


def test_stop_matcher_picks_the_earliest_stop() -> None:
    stops = StopMatcher(["bc", "abcd"])
    assert stops.feed("xxabcd") == "xx"  # "abcd" starts first
    assert stops.stopped
    assert stops.matched == "abcd"


def test_stop_split_over_many_deltas() -> None:
    stops = StopMatcher(["<end_of_turn>"])
    out = "".join(stops.feed(ch) for ch in "Paris.<end_of_turn>junk")
    assert out == "Paris."
    assert stops.stopped


async def test_engine_stream_concatenates_to_the_full_decode(
    generator: BatchingGenerator, tiny_llama: CausalLM
) -> None:
    for prompt in ("日本語のテキストです。絵文字も", "🎉🚀", "Très bien"):
        chunks: list[Chunk] = [c async for c in generator.generate(GenerationRequest(prompt=prompt, max_tokens=40))]
        tokens = [t for c in chunks for t in c.token_ids]
        streamed = "".join(c.text for c in chunks)
        assert streamed == tiny_llama.decode(tokens)
        # Replacement characters may only appear where the full decode has them too.
        assert streamed.count("\ufffd") == tiny_llama.decode(tokens).count("\ufffd")


async def test_a_request_that_does_not_stream_gets_its_answer_as_one_chunk(generator: BatchingGenerator) -> None:
    for prompt in ("日本語のテキストです。絵文字も", "Très bien"):
        streamed = [c async for c in generator.generate(GenerationRequest(prompt=prompt, max_tokens=24))]
        whole = [c async for c in generator.generate(GenerationRequest(prompt=prompt, max_tokens=24, stream=False))]
        assert len(streamed) > 1
        assert len(whole) == 1
        (answer,) = whole
        assert answer.text == "".join(c.text for c in streamed)
        assert answer.token_ids == tuple(t for c in streamed for t in c.token_ids)
        assert (answer.finish_reason, answer.usage) == (streamed[-1].finish_reason, streamed[-1].usage)
        assert answer.timings is not None
