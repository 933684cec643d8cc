"""One request in flight: its tokens, sampler, detokenizer, stop matcher and clocks.

Pure bookkeeping with no ONNX calls: the scheduler feeds it the token it chose and gets
back the chunk to stream. Shared by the batching scheduler and the single-sequence path.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
from tokenizers import Tokenizer

from nrt.adapters.inference.detokenize import IncrementalDetokenizer
from nrt.adapters.inference.errors import ContextWindowError, InferenceError
from nrt.adapters.inference.grammar import Constraint
from nrt.adapters.inference.logprobs import LogprobRecorder
from nrt.adapters.inference.penalties import LogitAdjustments
from nrt.adapters.inference.sampling import Sampler
from nrt.adapters.inference.stops import StopMatcher
from nrt.adapters.inference.structs import Chunk, FinishReason, GenerationRequest, Timings, Usage
from nrt.adapters.inference.transcript import Transcript, TranscriptRecorder, encode_prompt
from nrt.core.protocol import TokenLogprob


@dataclass(slots=True, eq=False)
class Generation:
    """The mutable state of one generation."""

    request: GenerationRequest
    prompt_ids: list[int]
    max_new: int
    eos_ids: frozenset[int]
    sampler: Sampler
    detok: IncrementalDetokenizer
    stops: StopMatcher
    tokens: list[int] = field(default_factory=list)  # prompt + generated
    recorder: TranscriptRecorder | None = None  # a session's turn: what its ids spell, for the next turn
    constraint: Constraint | None = None  # the response format's grammar: masks the logits, ends the answer
    adjustments: LogitAdjustments | None = None  # logit_bias and penalties (None: none asked for)
    logprobs: LogprobRecorder | None = None  # the client asked for each token's log-probability
    chosen_logprob: TokenLogprob | None = None  # the last chosen token's, until accept puts it on its chunk
    reused_ids: int = 0  # prompt ids taken from the session's transcript instead of tokenizing
    generated: int = 0
    finish_reason: FinishReason | None = None
    cached_tokens: int = 0  # prompt tokens whose KV came from a cache (its session's or a shared prefix's)
    prefix_shared: int = 0  # leading prompt ids shared with the best-matching prefix entry
    prefilled_tokens: int = 0
    batch_size_max: int = 1
    cancelled: bool = False
    generated_at_cancel: int | None = None  # tokens generated when its consumer left early
    t_submit: float = field(default_factory=time.perf_counter)
    t_prefill_start: float = 0.0
    t_prefill_end: float = 0.0
    t_first: float = 0.0
    t_last: float = 0.0

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    @property
    def last_token(self) -> int:
        return self.tokens[-1]

    @property
    def needs_logits(self) -> bool:
        """Its next token needs the whole row of logits on the host (not only the greedy id)."""
        return (
            not self.sampler.greedy
            or self.constraint is not None
            or self.adjustments is not None
            or self.logprobs is not None
        )

    def choose(self, logits: npt.NDArray[np.floating]) -> int:
        """The next token from one row of logits: biased and penalized (when asked), then within the
        response format when there is one."""
        if self.adjustments is not None:
            logits = self.adjustments.apply(logits)
        scored = logits
        if self.constraint is not None:
            logits = self.constraint.mask(logits)  # a copy: ``scored`` keeps the model's row
        token = self.sampler.choose(logits)
        if self.logprobs is not None:
            self.chosen_logprob = self.logprobs.entry(scored, token)
        return token

    def accept(self, token: int) -> Chunk:
        """Record the chosen token; return the chunk to stream (final when finished)."""
        now = time.perf_counter()
        if self.generated == 0:
            self.t_first = now
        self.t_last = now
        self.generated += 1
        self.tokens.append(token)
        if self.adjustments is not None:
            self.adjustments.record(token)
        logprob, self.chosen_logprob = self.chosen_logprob, None
        if token in self.eos_ids and not self.request.ignore_eos:
            return self._finish("stop", "", token)  # the end of the sequence is no token of the text: no logprob
        if self.constraint is not None:
            self.constraint.advance(token)
        piece = self.detok.step(token)
        if self.recorder is not None:
            self.recorder.feed(token, piece)
        text = self.stops.feed(piece)
        logprobs = (logprob,) if logprob is not None else ()
        if self.stops.stopped or (self.constraint is not None and self.constraint.complete):
            return self._finish("stop", text, token, logprobs)
        if self.generated >= self.max_new:
            return self._finish("length", text, token, logprobs)
        return Chunk(text=text, token_ids=(token,), logprobs=logprobs)

    def _finish(self, reason: FinishReason, text: str, token: int, logprobs: tuple[TokenLogprob, ...] = ()) -> Chunk:
        self.finish_reason = reason
        if not self.stops.stopped:
            tail, hit_stop = self._drain()
            text += tail
            if hit_stop:
                reason = self.finish_reason = "stop"
        return Chunk(
            text=text,
            token_ids=(token,),
            finish_reason=reason,
            usage=self.usage(),
            timings=self.timings(),
            stop_sequence=self.stops.matched,
            logprobs=logprobs,
        )

    def _drain(self) -> tuple[str, bool]:
        """Release held-back text at the end; a stop may still complete inside it."""
        piece = self.detok.flush()
        if self.recorder is not None:
            self.recorder.flush(piece)
        text = self.stops.feed(piece)
        return text + self.stops.flush(), self.stops.stopped

    def transcript(self) -> Transcript | None:
        return self.recorder.transcript() if self.recorder is not None else None

    def usage(self) -> Usage:
        prompt = len(self.prompt_ids)
        return Usage(
            prompt_tokens=prompt,
            completion_tokens=self.generated,
            total_tokens=prompt + self.generated,
            cached_tokens=self.cached_tokens,
        )

    def timings(self) -> Timings:
        decode_s = self.t_last - self.t_first
        steps = self.generated - 1
        return Timings(
            queue_ms=(self.t_prefill_start - self.t_submit) * 1e3,
            prefill_ms=(self.t_prefill_end - self.t_prefill_start) * 1e3,
            ttft_ms=(self.t_first - self.t_submit) * 1e3,
            decode_ms=decode_s * 1e3,
            decode_tokens_per_s=steps / decode_s if steps > 0 and decode_s > 0 else 0.0,
            total_ms=(self.t_last - self.t_submit) * 1e3,
            prefilled_tokens=self.prefilled_tokens,
            batch_size_max=self.batch_size_max,
        )


def start_generation(
    request: GenerationRequest,
    tokenizer: Tokenizer,
    encode: Callable[[str], list[int]],
    *,
    context_length: int,
    eos_ids: frozenset[int],
    vocab_size: int,
    special_ids: frozenset[int] = frozenset(),
    previous: Transcript | None = None,
    constraint: Constraint | None = None,
) -> Generation:
    """Tokenize and validate a request (raises :class:`ContextWindowError` early).

    ``previous`` is the transcript of the session's last turn: the part of the prompt's text
    that extends it takes its ids (see :mod:`nrt.adapters.inference.transcript`). ``constraint`` is
    the request's response format, compiled (:class:`~nrt.adapters.inference.grammar.Grammars`).
    """
    recorder: TranscriptRecorder | None = None
    reused = 0
    if request.prompt_ids is not None:
        prompt_ids = list(request.prompt_ids)
    else:
        if not request.add_special_tokens:

            def encode(text: str) -> list[int]:
                ids: list[int] = tokenizer.encode(text, add_special_tokens=False).ids
                return ids

        encoded = encode_prompt(request.prompt, encode, tokenizer, previous)
        prompt_ids, reused = encoded.ids, encoded.reused
        if request.session_id is not None:
            recorder = TranscriptRecorder(request.prompt, prompt_ids, encoded.marks, special_ids)
    if not prompt_ids:
        raise InferenceError("the prompt is empty (no tokens to condition on)")
    if request.max_tokens is not None and request.max_tokens < 1:
        raise InferenceError(f"max_tokens must be at least 1, got {request.max_tokens}")
    if request.temperature < 0 or not 0 < request.top_p <= 1:
        raise InferenceError(f"need temperature >= 0 and 0 < top_p <= 1, got {request.temperature}, {request.top_p}")
    adjustments = LogitAdjustments(request.logit_bias, request.presence_penalty, request.frequency_penalty)
    adjustments.check(vocab_size)
    prompt_tokens = len(prompt_ids)
    room = context_length - prompt_tokens
    max_new = request.max_tokens if request.max_tokens is not None else room
    if room < 1 or max_new > room:
        raise ContextWindowError(prompt_tokens=prompt_tokens, max_tokens=max_new, context_length=context_length)
    return Generation(
        request=request,
        prompt_ids=prompt_ids,
        max_new=max_new,
        eos_ids=eos_ids,
        sampler=Sampler(request.temperature, request.top_p, request.seed, request.top_k),
        detok=IncrementalDetokenizer(tokenizer, prompt_ids),
        stops=StopMatcher(request.stop),
        tokens=list(prompt_ids),
        recorder=recorder,
        reused_ids=reused,
        constraint=constraint,
        adjustments=adjustments if adjustments.active else None,
        logprobs=LogprobRecorder(tokenizer, request.top_logprobs) if request.logprobs else None,
    )
