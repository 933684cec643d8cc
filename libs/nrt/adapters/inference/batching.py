"""Continuous batching: concurrent requests to one model share each decode step.

One scheduler thread per model owns the ONNX session. Each iteration it

1. admits queued requests (rows in flight stay within ``max_batch_size``) and prefills
   them one at a time, alone (batch of 1, no padding), starting from the session's cached
   KV prefix when the request names a session, or from a shared prefix's KV (its owner's
   template or system prompt, :mod:`nrt.adapters.inference.prefixes`) when that covers more. Prompts run in chunks of
   ``prefill_chunk_tokens``; while other rows are decoding, only one chunk's worth of
   prompt tokens runs per iteration, so a long prompt delays the running streams by one
   chunk per token instead of stalling them. A finished prompt streams its first token at once
   (prompts admitted together do not wait for each other's prefill);
2. regroups the batch: finished and cancelled rows leave, prefilled rows join, and the
   left-padded cache is rebuilt once (see :mod:`nrt.adapters.inference.kv`);
3. runs ONE decode step for every active row: ``input_ids [B, 1]``, an attention mask
   that hides each row's left padding, and ``position_ids`` = each row's own length, so
   every row computes exactly what it would compute alone.

The forward pass binds its inputs and outputs with IOBinding (:class:`~nrt.adapters.inference.causal.Stepper`):
the cache stays on the session's device as ``OrtValue`` s from prefill to the last step and
into the session store, regrouping runs on the device too, and only logits (only the chosen
ids when every row is greedy, on a device other than the CPU) come back to the host.

Chunks go back to each request's event loop through a per-loop mailbox: one
``call_soon_threadsafe`` wakes the loop, and chunks produced while it is still busy join
the pending delivery. A request that does not stream gets one chunk, when it finishes.
The event loop never runs ONNX and never blocks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
import weakref
from collections import deque
from collections.abc import AsyncGenerator, Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import msgspec
import numpy as np

from nrt.adapters.inference.causal import CausalLM
from nrt.adapters.inference.errors import GeneratorClosedError, GrammarError
from nrt.adapters.inference.generation import Generation, start_generation
from nrt.adapters.inference.grammar import Grammars, prepare_all
from nrt.adapters.inference.kv import BatchKV, RowKV, SessionKV, leading, width_of
from nrt.adapters.inference.kv_tensors import KV, OrtValue, kv_nbytes
from nrt.adapters.inference.prefixes import PrefixCache, common_prefix
from nrt.adapters.inference.sessions import SessionStore, SessionUsage
from nrt.adapters.inference.structs import Chunk, GenerationRequest

log = logging.getLogger("nrt.adapters.inference")

_PREFILL_LOGITS_BYTES = 64 * 1024 * 1024  # bound on one prefill chunk's [1, T, vocab] logits
DEFAULT_PREFIX_CACHE_BYTES = 64 * 1024 * 1024  # the shared prefixes' KV one model holds, at most

PrefixKV = tuple[OrtValue, ...]

Item = Chunk | BaseException


class _Mailbox:
    """Chunks on their way to one event loop.

    The scheduler wakes the loop (a self-pipe write) only when the loop has nothing
    pending; while the loop is busy, later chunks join the pending batch instead.
    """

    __slots__ = ("_items", "_lock", "_scheduled", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._lock = threading.Lock()
        self._items: list[tuple[asyncio.Queue[Item], Item]] = []
        self._scheduled = False

    def post(self, items: list[tuple[asyncio.Queue[Item], Item]]) -> None:
        with self._lock:
            self._items.extend(items)
            if self._scheduled:
                return
            self._scheduled = True
        with contextlib.suppress(RuntimeError):  # a closed loop: its consumers are gone
            self.loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        with self._lock:
            items, self._items, self._scheduled = self._items, [], False
        for queue, item in items:
            queue.put_nowait(item)


@dataclass(slots=True, eq=False)
class _Prefill:
    """A prompt part-way through prefill: its cache so far and how many tokens it covers."""

    past: KV
    done: int


@dataclass(slots=True, eq=False)
class _Ticket:
    gen: Generation
    mailbox: _Mailbox
    queue: asyncio.Queue[Item]
    prefill: _Prefill | None = None
    held: list[Chunk] = field(default_factory=list)  # a non-streaming request's chunks so far

    def deliverable(self, item: Item) -> Item | None:
        """What to send for ``item``: itself when streaming; else nothing until the last
        chunk, which then carries the whole answer."""
        if self.gen.request.stream or not isinstance(item, Chunk):
            return item
        if item.finish_reason is None:
            self.held.append(item)
            return None
        if not self.held:
            return item
        held, self.held = [*self.held, item], []
        return msgspec.structs.replace(
            item,
            text="".join(chunk.text for chunk in held),
            token_ids=tuple(token for chunk in held for token in chunk.token_ids),
            logprobs=tuple(entry for chunk in held for entry in chunk.logprobs),
        )


@dataclass(slots=True, eq=False)
class _Outbox:
    """Chunks produced by one scheduler iteration, grouped per event loop."""

    items: dict[_Mailbox, list[tuple[asyncio.Queue[Item], Item]]] = field(default_factory=dict)

    def put(self, ticket: _Ticket, item: Item) -> None:
        out = ticket.deliverable(item)
        if out is not None:
            self.items.setdefault(ticket.mailbox, []).append((ticket.queue, out))

    def send(self) -> None:
        for mailbox, items in self.items.items():
            mailbox.post(items)
        self.items = {}


def _dropped(gen: Generation) -> None:
    """Say that a generation whose consumer left is out of the batch, and how many tokens it ran on for."""
    if gen.generated_at_cancel is None:  # failed by the scheduler itself, not left by its consumer
        return
    log.info(
        "request %s stopped after %d tokens, %d after its consumer left",
        gen.request.request_id or "(unnamed)",
        gen.generated,
        gen.generated - gen.generated_at_cancel,
    )


@dataclass(frozen=True, slots=True)
class BatcherStats:
    active: int  # rows decoding
    prefilling: int  # admitted, prompt still running
    queued: int  # waiting for a row
    steps: int  # decode steps run
    rebuilds: int  # batch regroupings (joins/leaves)
    session_bytes: int
    prefix_bytes: int  # the shared prefixes' KV


class BatchingGenerator:
    """Serve concurrent generation requests for one :class:`CausalLM`, batching decode steps."""

    def __init__(
        self,
        model: CausalLM,
        *,
        max_batch_size: int = 16,
        sessions: SessionStore | None = None,
        prefill_chunk_tokens: int | None = None,
        on_step: Callable[[int], None] | None = None,
        prefix_cache_bytes: int = DEFAULT_PREFIX_CACHE_BYTES,
    ) -> None:
        self.model = model
        self.prefixes: PrefixCache[PrefixKV] = PrefixCache(prefix_cache_bytes)
        self.on_step = on_step  # told each decode step's batch size, from the scheduler thread (metrics)
        self.sessions = sessions if sessions is not None else SessionStore()
        # Without position_ids the graph derives positions from the cache length, which
        # left padding would corrupt: such models are served one row at a time.
        self.max_batch_size = max(1, max_batch_size) if model.can_batch else 1
        self.prefill_chunk_tokens = prefill_chunk_tokens or max(
            16, _PREFILL_LOGITS_BYTES // (4 * model.spec.vocab_size)
        )
        self.grammars = Grammars(model.tokenizer, model.spec.vocab_size, model.eos_ids)  # response formats
        self._pending: deque[_Ticket] = deque()
        self._mailboxes: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Mailbox] = weakref.WeakKeyDictionary()
        self._cond = threading.Condition()
        self._closed = False
        self._thread: threading.Thread | None = None
        # Owned by the scheduler thread:
        self._rows: list[_Ticket] = []
        self._prefilling: deque[_Ticket] = deque()  # admitted, prompt not fully run yet
        self._prefixes_to_keep: list[tuple[Generation, KV]] = []  # prompts just prefilled, for the prefix cache
        self._kv = BatchKV(right_padded=self.model.right_padded)
        self._next = np.zeros((0, 1), dtype=np.int64)
        self._stepper = model.stepper()
        self._ops = model.ops
        self._steps = 0
        self._rebuilds = 0
        self._masks: ThreadPoolExecutor | None = None  # computes the grammars' masks during the forward pass

    # ----------------------------------------------------------------- public API

    async def generate(self, request: GenerationRequest) -> AsyncGenerator[Chunk, None]:
        """Stream the chunks of one request. Raises ``ContextWindowError`` (or ``GrammarError``, for a
        response format that does not compile) before any chunk."""
        response_format, tools = request.response_format, request.tools
        constraint = None
        calls = tools is not None and tools.choice != "none"
        if response_format is not None or calls:  # compiled once per schema, off the event loop and the scheduler
            constraint = await asyncio.to_thread(self.grammars.constraint, response_format, tools, request.answer_lead)
        gen = start_generation(
            request,
            self.model.tokenizer,
            self.model.encode,
            context_length=self.model.spec.context_length,
            eos_ids=self.model.eos_ids,
            vocab_size=self.model.tokenizer_vocab_size,
            special_ids=self.model.special_ids,
            previous=self.sessions.transcript(request.session_id) if request.session_id else None,
            constraint=constraint,
        )
        ticket = _Ticket(gen, self._mailbox(asyncio.get_running_loop()), asyncio.Queue())
        self._submit(ticket)
        try:
            while True:
                item = await ticket.queue.get()
                if isinstance(item, BaseException):
                    raise item
                yield item
                if item.finish_reason is not None:
                    return
        finally:
            if not gen.finished:
                gen.generated_at_cancel = gen.generated
                gen.cancelled = True  # the consumer left early: the scheduler drops the row
                with self._cond:
                    self._cond.notify()

    def evict_session(self, session_id: str) -> int:
        """Free a session's KV cache; returns the bytes freed."""
        return self.sessions.evict(session_id)

    def session_bytes(self, session_id: str) -> int:
        return self.sessions.bytes_held(session_id)

    def session_usage(self) -> list[SessionUsage]:
        return self.sessions.usage()

    def stats(self) -> BatcherStats:
        with self._cond:
            queued = len(self._pending)
        return BatcherStats(
            active=len(self._rows),
            prefilling=len(self._prefilling),
            queued=queued,
            steps=self._steps,
            rebuilds=self._rebuilds,
            session_bytes=self.sessions.total_bytes,
            prefix_bytes=self.prefixes.total_bytes,
        )

    async def aclose(self) -> None:
        """:meth:`close` without blocking the event loop while the current step finishes."""
        await asyncio.to_thread(self.close)

    def close(self) -> None:
        """Stop the scheduler; queued and running requests fail with GeneratorClosedError."""
        with self._cond:
            self._closed = True
            self._cond.notify()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _mailbox(self, loop: asyncio.AbstractEventLoop) -> _Mailbox:
        with self._cond:
            mailbox = self._mailboxes.get(loop)
            if mailbox is None:
                mailbox = self._mailboxes[loop] = _Mailbox(loop)
            return mailbox

    # ------------------------------------------------------------ scheduler thread

    def _submit(self, ticket: _Ticket) -> None:
        with self._cond:
            if self._closed:
                raise GeneratorClosedError("the generator is closed")
            self._pending.append(ticket)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run,
                    name=f"nrt-batcher-{self.model.artifact_dir.name}",
                    daemon=True,
                )
                self._thread.start()
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._closed and not self._pending and not self._rows and not self._prefilling:
                    self._cond.wait()
                if self._closed:
                    break
                room = self.max_batch_size - len(self._rows) - len(self._prefilling)
                admitted = [self._pending.popleft() for _ in range(min(room, len(self._pending)))]
            self._prefilling.extend(admitted)
            outbox = _Outbox()
            try:
                self._iterate(outbox)
            except Exception as exc:  # fail the requests involved, keep serving
                self._fail_all(exc, outbox)
            outbox.send()
        if self._masks is not None:
            self._masks.shutdown(wait=False)
        closed = GeneratorClosedError("the generator was closed")
        outbox = _Outbox()
        with self._cond:
            self._prefilling.extend(self._pending)
            self._pending.clear()
        self._fail_all(closed, outbox)
        outbox.send()

    def _iterate(self, outbox: _Outbox) -> None:
        """One scheduler iteration: some prefill work, a regroup, one decode step."""
        joined: list[tuple[_Ticket, RowKV]] = []
        # While rows are decoding, prefill at most one chunk's worth of prompt tokens per
        # iteration, so a long prompt delays their next token by one chunk, not by all of it.
        budget = self.prefill_chunk_tokens if self._rows else None
        while self._prefilling and (budget is None or budget > 0):
            ticket = self._prefilling[0]
            if ticket.gen.cancelled:
                self._prefilling.popleft()
                _dropped(ticket.gen)
                continue
            try:
                used, row = self._prefill_chunk(ticket, outbox)
            except Exception as exc:  # one bad prompt fails only its request
                self._prefilling.popleft()
                ticket.gen.cancelled = True
                outbox.put(ticket, exc)
                continue
            if budget is not None:
                budget -= used
            if ticket.prefill is None:  # the prompt is done: its first token goes out now, not after the others'
                self._prefilling.popleft()
                outbox.send()
                if row is not None:
                    joined.append((ticket, row))
        kept, self._prefixes_to_keep = self._prefixes_to_keep, []
        for gen, past in kept:
            self._keep_prefix(gen, past)
        leaving = [i for i, t in enumerate(self._rows) if t.gen.cancelled]
        for i in leaving:
            _dropped(self._rows[i].gen)
        if leaving or joined:
            self._regroup(leaving, joined)
        if self._rows:
            self._decode(outbox)

    def _start_prefill(self, ticket: _Ticket) -> _Prefill:
        """Start from the longest cached prefix of the prompt: the session's, or a shared prefix's."""
        gen = ticket.gen
        gen.t_prefill_start = time.perf_counter()
        prompt = gen.prompt_ids
        session_id = gen.request.session_id
        owner = gen.request.prefix_owner
        cached = self.sessions.take(session_id) if session_id else None
        reuse = min(common_prefix(cached.tokens, prompt), len(prompt) - 1) if cached is not None else 0
        shared = self.prefixes.match(owner, prompt) if owner is not None else None
        if shared is not None:
            gen.prefix_shared = shared.length
            from_prefix = min(shared.length, len(prompt) - 1)
            if from_prefix > reuse:
                gen.cached_tokens = from_prefix
                return _Prefill(leading(shared.entry.kv, from_prefix, self._ops).past, from_prefix)
        if cached is None or reuse <= 0:
            return _Prefill(self._ops.empty_past(), 0)
        gen.cached_tokens = reuse
        return _Prefill(cached.prefix(reuse, self._ops).past, reuse)

    def _keep_prefix(self, gen: Generation, past: KV) -> None:
        """After a prompt's prefill: hold the part it shares with a held entry of its owner or, failing
        that and unless it continued its session's cache, with an earlier prompt of its owner (a candidate:
        ids only), copied from its own cache, which holds those columns. A prompt that shares nothing is
        only noted: no copy."""
        owner = gen.request.prefix_owner
        if owner is None:
            return
        prompt = gen.prompt_ids
        continued = gen.request.session_id is not None and gen.cached_tokens > gen.prefix_shared
        length = self.prefixes.worth_storing(prompt, gen.prefix_shared)
        if length <= 0 and not continued:
            length = self.prefixes.note_candidate(owner, prompt)
        if length <= 0:
            return

        def kv_of(n: int) -> tuple[PrefixKV, int]:
            kv = tuple(leading(past, n, self._ops).past)
            return kv, kv_nbytes(kv)

        self.prefixes.store(owner, prompt[:length], kv_of)

    def _prefill_chunk(self, ticket: _Ticket, outbox: _Outbox) -> tuple[int, RowKV | None]:
        """Run the next chunk of a prompt. When the prompt is done, choose and stream the
        first token and return the row's cache (None when the request already finished)."""
        gen = ticket.gen
        state = ticket.prefill or self._start_prefill(ticket)
        prompt = gen.prompt_ids
        start = state.done
        end = min(start + self.prefill_chunk_tokens, len(prompt))
        ids = np.array([prompt[start:end]], dtype=np.int64)
        mask = np.ones((1, end), dtype=np.int64)
        positions = np.arange(start, end, dtype=np.int64)[None, :]
        logits, state.past = self._stepper.run(ids, mask, positions, state.past)
        state.done = end
        if end < len(prompt):
            ticket.prefill = state
            return end - start, None
        ticket.prefill = None
        gen.prefilled_tokens = len(prompt) - gen.cached_tokens
        gen.t_prefill_end = time.perf_counter()
        outbox.put(ticket, gen.accept(self._first_token(gen, logits)))
        if gen.request.prefix_owner is not None and gen.finished:
            self._keep_prefix(gen, state.past)  # before its last chunk goes: its answer ends with it recorded
        elif gen.request.prefix_owner is not None:
            self._prefixes_to_keep.append((gen, state.past))  # once the first tokens are out, before its next
        if gen.finished:
            self._keep_session(gen, tuple(state.past))
            return end - start, None
        return end - start, RowKV(state.past, len(prompt))

    def _first_token(self, gen: Generation, logits: OrtValue) -> int:
        """The token after a prompt: only its id comes to the host when greedy."""
        if not gen.needs_logits:
            return int(self._ops.greedy(logits)[0])
        return gen.choose(self._ops.last_logits(logits)[0])

    def _prepare_masks(self) -> Future[None] | None:
        """Start computing the constrained rows' next masks, to run beside the model's forward pass."""
        constraints = [t.gen.constraint for t in self._rows if t.gen.constraint is not None]
        if not constraints:
            return None
        if self._masks is None:
            self._masks = ThreadPoolExecutor(1, thread_name_prefix=f"nrt-grammar-{self.model.artifact_dir.name}")
        return self._masks.submit(prepare_all, constraints)

    def _decode(self, outbox: _Outbox) -> None:
        kv = self._kv
        masks = self._prepare_masks()
        output, presents = self._stepper.run(self._next, kv.attention_mask(), kv.lengths[:, None], kv.past)
        if masks is not None:
            masks.result()
        kv.advance(presents)
        self._steps += 1
        size = kv.size
        if self.on_step is not None:
            self.on_step(size)
        rows = self._rows
        if not any(t.gen.needs_logits for t in rows):  # only the ids come to the host
            logits = None
            greedy = self._ops.greedy(output)
        else:
            logits = self._ops.last_logits(output)
            plain = [b for b, t in enumerate(rows) if not t.gen.needs_logits]  # greedy, unconstrained
            greedy = np.zeros(len(rows), dtype=np.int64)
            greedy[plain] = logits[plain].argmax(axis=-1)
        finished: list[int] = []
        for b, ticket in enumerate(rows):
            gen = ticket.gen
            if size > gen.batch_size_max:
                gen.batch_size_max = size
            try:
                token = int(greedy[b]) if logits is None or not gen.needs_logits else gen.choose(logits[b])
                outbox.put(ticket, gen.accept(token))
            except GrammarError as exc:  # its response format failed: only this row ends (it leaves next step)
                gen.cancelled = True
                outbox.put(ticket, exc)
                continue
            self._next[b, 0] = token
            if gen.finished:
                finished.append(b)
        if finished:
            for b in finished:
                gen = self._rows[b].gen
                if gen.request.session_id is not None:
                    self._keep_session(gen, kv.row(b, self._ops))
            self._regroup(finished, [])

    def _regroup(self, leaving: Sequence[int], joined: Sequence[tuple[_Ticket, RowKV]]) -> None:
        gone = set(leaving)
        keep = [i for i in range(len(self._rows)) if i not in gone]
        self._kv.rebuild(keep, [row for _, row in joined], self._ops)
        self._rows = [self._rows[i] for i in keep] + [t for t, _ in joined]
        self._next = np.concatenate(
            [
                self._next[keep],
                np.array([[t.gen.last_token] for t, _ in joined], dtype=np.int64).reshape(-1, 1),
            ]
        )
        self._rebuilds += 1

    def _keep_session(self, gen: Generation, past: tuple[OrtValue, ...]) -> None:
        session_id = gen.request.session_id
        if session_id is None:
            return
        length = width_of(past)
        self.sessions.put(session_id, SessionKV(tuple(gen.tokens[:length]), past, gen.transcript()))

    def _fail_all(self, exc: BaseException, outbox: _Outbox) -> None:
        for ticket in [*self._rows, *self._prefilling]:
            if not ticket.gen.finished and not ticket.gen.cancelled:
                ticket.gen.cancelled = True  # terminal: no further chunks
                outbox.put(ticket, exc)
        self._rows = []
        self._prefilling.clear()
        self._kv = BatchKV(right_padded=self.model.right_padded)
        self._next = np.zeros((0, 1), dtype=np.int64)
