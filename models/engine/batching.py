"""Continuous batching: several replies generated at once by one model (engine side).

The engine has ``LoadSettings.parallel`` *slots*; slot *i* is llama.cpp sequence *i*, with
a KV cache of its own of the full per-slot context (``kv_unified`` off: attention of one
sequence never reads another's cells). Each step builds ONE ``llama_batch``:

- every slot that is generating contributes its last picked token (with logits);
- slots still reading their prompt fill the rest of the batch with prompt tokens (logits
  only for a prompt's last token), so a long prompt never stalls the others for long;

then one ``llama_decode`` computes them all, and each slot's own sampler picks its next
token from its row of logits (``llama_sampler_sample(chain, ctx, row)``). Requests join
between steps, when a slot is free, in arrival order, and leave when they end; the others
go on undisturbed.

Prompt reuse. A slot keeps its KV cache after its request; a new request goes to the free
slot whose cache shares the longest prefix with its prompt, unless the prompt cache
(``prompt_cache.py``) or the conversation's saved session holds a longer one, which is then
copied into a slot. A slot's content about to be overwritten is first copied out to the
prompt cache, so many clients taking turns do not evict each other's conversations.

Cancel. Each request has a lane in the shared cancel memory (``cancel_flag.py``); a
cancelled request ends before the next step, and llama.cpp's abort callback stops a step
already running, which is then done again without the cancelled request.

Structured output. A reply under a grammar (JSON, a JSON Schema, tool calls, GBNF) is a
reply like the others, with :class:`~models.structured.fast_forward.ConstrainedSteps`
choosing its tokens: the grammar's sampler picks from its row, and a run of forced tokens
(guided fast-forward) enters the next batch as several entries of its sequence, with
logits only for the last. Every finished reply is validated.

Speculation. A generating reply may add a draft after its chosen tokens: prompt lookup's
guess of what comes next (``speculation.py``, adaptive per reply, cut where a grammar
refuses a token), with logits at every position; which replies' drafts go in, and how
long, is planned for the step as a whole, since a draft of one reply can cost the others a
second pass (``speculation.plan_drafts``). The batch holds the sequences in order of their
ids, and an idle slot between two busy ones gets a filler token (removed after the decode)
when that saves a pass (``_fillers``). After the step's decode its sampler picks
from those rows in turn and keeps the draft while the picks equal it, so the reply is what
plain decoding gives; the cells of rejected draft tokens leave the slot's cache at once
(``llama_memory_seq_rm``), and the slot's tokens are always exactly its cache.

Exclusive requests. Speculation with a draft model drives the model through
:class:`~models.engine.runtime.LoadedModel` (the draft model keeps a context of its own
for one conversation); such a request waits until the running replies end and then has
the engine to itself on slot 0. Later requests wait behind it, so arrival order holds.

Text is sent in deltas at most every ``FLUSH_SECONDS``, and what is left at the end goes
with the ``done`` event. The replies share that timer, so the deltas of a step travel in
one message (a ``deltas`` event carrying several), not one per reply. Until a reply's
first visible text has gone out, each token's text is sent at once: a reply that opens
with a newline or ``<think>`` (which the server's dialects drop or turn into a thinking
block) still shows its first word as soon as it is picked, which is the time to first
token a client measures. Every message wakes
threads in the client's process (its pipe reader, then whoever consumes the reply), and
while llama.cpp keeps every core busy each wake-up preempts one of its threads, which the
others then wait for: fewer messages are a few per cent more decode speed on a small
model, and more with several replies at once. 20 a second is as often as the Chat page
renders.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import llama_cpp
import numpy as np

from models.engine.cancel_flag import lane_cancelled, take_abort
from models.engine.options import ChatOptions, ChatStats, output_constraint
from models.engine.prompt_cache import MIN_TOKENS, PromptCache, common_prefix
from models.engine.reasoning import OPEN_TAG, ReasoningSplitter, prompt_opens_reasoning
from models.engine.sessions import (SessionStore, SessionUnusable, capture_state, restore_state)
from models.engine.speculation import (MOST_STEP_TOKENS, LookupDrafter, StepCost, plan_drafts,
                                      ubatch_sizes)
from models.engine.token_stream import Sampler, StopFilter, TokenTextDecoder
from models.engine.vision import position_after
from models.foundation.errors import QuantDeskError
from models.images import has_images

log = logging.getLogger(__name__)


def _text_tokens(tokens: list[int]) -> int:
    """How many of a prompt's tokens are text (images are runs of negative placeholders)."""
    return sum(1 for t in tokens if t >= 0)

FLUSH_SECONDS = 0.05
MAX_TOP_LOGPROBS = 20


@dataclass
class Slot:
    """One llama.cpp sequence and what its KV cache holds."""

    seq_id: int
    tokens: list[int] = field(default_factory=list)
    conversation_id: Optional[str] = None
    last_used: float = 0.0
    reply: Optional["Reply"] = None


class Reply:
    """One request being answered in a slot."""

    def __init__(self, request: dict, options: ChatOptions, tokens: list[int], slot: Slot,
                 model: Any, stats: ChatStats, started: float, opens_reasoning: bool,
                 constraint: Any = None, images: Any = None,
                 step_cost: Optional[StepCost] = None) -> None:
        self.id = request["id"]
        self.images = images  # the prompt's image chunks (vision.ImagePrompt), or None
        self.lane = request["lane"]
        self.conversation_id = request.get("conversation_id")
        self.options = options
        self.prompt = tokens
        self.slot = slot
        self.stats = stats
        self.started = started
        self.sampler = Sampler(options, model.llm.n_vocab())
        stats.seed = self.sampler.seed
        self.decoder = TokenTextDecoder(model.vocab, model.token_pieces)
        self.stops = StopFilter(tuple(options.stop) + model.preset_stops)
        self.next_prompt = len(slot.tokens)  # the first prompt token not in the cache
        # Tokens chosen but not yet evaluated: the last picked one, and for structured
        # output the forced run after it. The last of them gets logits.
        self.pending: list[int] = []
        # Speculation: guessed tokens after ``pending`` in this step's batch (logits at
        # each), and who guesses them; None for a reply that does not draft.
        self.draft: list[int] = []
        self.drafter: Optional[LookupDrafter] = None
        if options.speculative == "prompt_lookup" and images is None:
            self.drafter = LookupDrafter(options.draft_tokens, options.ngram_size, model.n_ctx,
                                         step_cost or StepCost())
        self.prefill_end = 0.0
        self.first_token_at = 0.0
        self.last_token_at = 0.0
        self.out_text: list[str] = []
        self.out_logprobs: list[dict] = []
        self.shown = False  # a delta with visible text has been sent
        # Counts the thinking tokens of a reasoning model; dropped once the answer starts.
        self.reasoning: Optional[ReasoningSplitter] = ReasoningSplitter(opened=opens_reasoning)
        # Structured output: the grammar's steps, and the whole reply for the validation.
        self.constraint = constraint
        self.steps = None
        self.text: list[str] = []
        if constraint is not None:
            from models.structured.fast_forward import ConstrainedGenerator

            # Forced text past the budget is never evaluated: only sampled tokens need room.
            self.room = model.n_ctx - len(tokens) - 1
            self.steps = ConstrainedGenerator(model.llm, constraint.grammar, options,
                                              fast_forward=options.fast_forward).steps(
                                                  min(options.max_tokens, self.room))
            self.reasoning = None
            stats.not_enforced = [p.to_dict() for p in constraint.not_enforced]

    @property
    def reading_prompt(self) -> bool:
        return self.next_prompt < len(self.prompt)

    def close(self) -> None:
        """Free the native samplers (a reply that ends with an error) and image chunks."""
        self.sampler.close()
        if self.steps is not None:
            self.steps.close()
        self.release_images()

    def release_images(self) -> None:
        if self.images is not None:
            self.images.close()
            self.images = None


class BatchScheduler:
    """The engine's continuous batching loop over one loaded model.

    Args:
        model: The :class:`~models.engine.runtime.LoadedModel`.
        cancel_shared: The shared cancel bytes (``cancel_flag``).
        send: Sends an event dict to the client.
        cache_ram_bytes: RAM budget of the prompt cache.
        session_store: Saved sessions (conversation states and spilled prompt-cache entries).
    """

    def __init__(self, model: Any, cancel_shared: Any, send: Callable[[dict], None],
                 cache_ram_bytes: int, session_store: Optional[SessionStore] = None) -> None:
        self.model = model
        self.ctx = model.llm.ctx
        self.memory = llama_cpp.llama_get_memory(self.ctx)
        llama_cpp.llama_memory_seq_rm(self.memory, -1, -1, -1)  # the self-test's cells
        self.cancel = cancel_shared
        self.send = send
        self.store = session_store
        self.cache = PromptCache(cache_ram_bytes, session_store, model.fingerprint)
        self.slots = [Slot(i) for i in range(model.parallel)]
        self.waiting: deque[dict] = deque()
        self.capacity = max(1, min(model.n_batch, model.n_ubatch))
        self.batch = llama_cpp.llama_batch_init(self.capacity, 0, 1)
        self.n_vocab = model.llm.n_vocab()
        self.after_reply: list[Callable[[], None]] = []
        self.last_flush = 0.0  # when the replies' text last went out on the timer
        # Images whose positions differ from their tokens (M-RoPE), by placeholder id.
        self.image_positions: dict[int, tuple[int, int]] = {}
        # What a step's tokens cost, measured on the steps that read no prompt: how long
        # the replies' drafts may be (speculation.py).
        self.step_cost = StepCost()
        # One KV stream per slot: llama.cpp splits a batch into micro-batches of equal
        # tokens per sequence (speculation.ubatch_sizes).
        self.split_equal = model.parallel > 1

    def _position(self, slot: Slot, count: Optional[int] = None) -> int:
        """The KV position after the first ``count`` of ``slot``'s tokens (all of them by
        default): llama.cpp addresses a sequence's cells by position."""
        return position_after(slot.tokens, len(slot.tokens) if count is None else count,
                              self.image_positions)

    def close(self) -> None:
        """Free the batch and the samplers; requests still here get an error."""
        self.fail_all("The model was unloaded before the reply was finished.",
                      "Send the message again.")
        if self.batch is not None:
            llama_cpp.llama_batch_free(self.batch)
            self.batch = None
        self.cache.clear()

    # -- requests in and out ----------------------------------------------------------

    def submit(self, request: dict) -> None:
        """Queue a ``chat`` request; it is admitted when a slot is free."""
        if self.store is not None and request.get("session_cap_bytes"):
            self.store.cap_bytes = request["session_cap_bytes"]  # the client's latest budget
        self.waiting.append(request)

    def busy(self) -> bool:
        """Whether a request is running or waiting."""
        return bool(self.waiting) or any(s.reply is not None for s in self.slots)

    def _error(self, request_id: int, exc: QuantDeskError) -> None:
        self.send({"event": "error", "id": request_id, "what": exc.what, "fix": exc.fix})

    def fail_all(self, what: str, fix: str) -> None:
        """End every request with an error (the model is being replaced)."""
        for slot in self.slots:
            if slot.reply is not None:
                reply, slot.reply = slot.reply, None
                reply.close()
                self._error(reply.id, QuantDeskError(what, fix))
        while self.waiting:
            self._error(self.waiting.popleft()["id"], QuantDeskError(what, fix))

    def _send_deltas(self, now: float) -> None:
        """Send the text the replies have made since their last delta: each token's at once
        until a reply has shown visible text, then every ``FLUSH_SECONDS`` — one timer for
        all replies, so that their deltas travel together, in one message (``deltas``)
        when there are several."""
        due = now - self.last_flush >= FLUSH_SECONDS
        events = []
        for slot in self.slots:
            reply = slot.reply
            if reply is None or not (reply.out_text or reply.out_logprobs) \
                    or (reply.shown and not due):
                continue
            text = "".join(reply.out_text)
            event = {"event": "delta", "id": reply.id, "text": text}
            if reply.out_logprobs:
                event["logprobs"] = reply.out_logprobs
                reply.out_logprobs = []
            reply.out_text = []
            reply.shown = reply.shown or bool(text.replace(OPEN_TAG, "").strip())
            events.append(event)
        if not events:
            return
        if due:
            self.last_flush = now
        self.send(events[0] if len(events) == 1 else {"event": "deltas", "events": events})

    def _finish(self, reply: Reply, reason: str) -> None:
        stats = reply.stats
        if reply.steps is not None:
            reason = self._end_constrained(reply, reason)
        stats.stop_reason = reason
        if reason != "cancelled" or reply.first_token_at:
            tail = reply.stops.push(reply.decoder.flush()) + reply.stops.flush()
            if tail:
                reply.out_text.append(tail)
        done: dict = {"event": "done", "id": reply.id}
        if reply.out_text:  # the last text goes with the end: one message, not two
            done["text"], reply.out_text = "".join(reply.out_text), []
        if reply.out_logprobs:
            done["logprobs"], reply.out_logprobs = reply.out_logprobs, []
        if reply.first_token_at:
            stats.decode_seconds = reply.last_token_at - reply.first_token_at
            decoded = stats.completion_tokens - 1
            stats.decode_tokens_per_second = decoded / stats.decode_seconds \
                if decoded > 0 and stats.decode_seconds > 0 else 0.0
        if reply.reasoning is not None and reply.reasoning.had_reasoning:
            reply.reasoning.finish()  # cut off while thinking: all of it was reasoning
            stats.reasoning_seconds = reply.reasoning.seconds or 0.0
        reply.sampler.close()
        reply.release_images()
        slot = reply.slot
        slot.reply, slot.last_used = None, time.monotonic()
        slot.conversation_id = reply.conversation_id
        done["stats"] = stats.to_dict()
        self.send(done)
        if reply.conversation_id is not None and self.store is not None and slot.tokens:
            tokens, seq, cid = list(slot.tokens), slot.seq_id, reply.conversation_id
            self.after_reply.append(lambda: self._save_session(seq, tokens, cid))

    def _save_session(self, seq_id: int, tokens: list[int], conversation_id: str) -> None:
        slot = self.slots[seq_id]
        if slot.reply is not None or slot.tokens != tokens:
            return  # the slot moved on before its state could be saved
        started = time.perf_counter()
        self.store.save(conversation_id, self.model.fingerprint, tokens,
                        capture_state(self.ctx, seq_id))
        log.info("session %s saved: %d tokens in %.3f s", conversation_id, len(tokens),
                 time.perf_counter() - started)

    def run_after_reply(self) -> None:
        """Saves that wait until the replies are sent (called by the engine loop)."""
        while self.after_reply:
            try:
                self.after_reply.pop(0)()
            except Exception:  # a failed save only costs a prefill next time
                log.exception("engine: saving a conversation's state failed")

    # -- admission --------------------------------------------------------------------

    @staticmethod
    def is_exclusive(options: ChatOptions) -> bool:
        """Requests that drive the model their own way and need it alone: a draft model's
        (prompt lookup drafts inside the batch)."""
        return options.speculative == "draft_model"

    def _admit(self) -> None:
        while self.waiting:
            free = [s for s in self.slots if s.reply is None]
            if not free:
                return
            request = self.waiting[0]
            try:
                options = ChatOptions.from_dict(request["options"])
                if self.is_exclusive(options) and not has_images(request.get("messages")):
                    if len(free) < len(self.slots):
                        return  # waits for the running replies to end
                    self.waiting.popleft()
                    self._run_exclusive(request, options)
                    continue
                self.waiting.popleft()
                self._start(request, options, free)
            except QuantDeskError as exc:
                self._error(request["id"], exc)

    def _tokens_of(self, request: dict, options: ChatOptions) -> tuple[list[int], str, Any]:
        """The prompt's tokens and text (rendered from the messages, or raw), and its image
        chunks when the messages carry images (else ``None``)."""
        model = self.model
        prompt = request.get("prompt")
        images = None
        if prompt is None and has_images(request["messages"]):
            images, text = model.prompt_with_images(request["messages"], options.thinking, options.tools)
            tokens = images.tokens
        else:
            text = prompt if prompt is not None else model.render(request["messages"],
                                                                   options.thinking, options.tools)
            tokens = model.tokenize_prompt(text)
        try:
            if not tokens:
                raise QuantDeskError("The prompt is empty.", "Send some text to complete.")
            if len(tokens) >= model.n_ctx:
                counted = f" (its {images.image_count} images take {len(tokens) - _text_tokens(tokens)})" \
                    if images is not None else ""
                raise QuantDeskError(
                    f"The conversation is {len(tokens)} tokens long{counted}, more than the "
                    f"{model.n_ctx}-token context the model was loaded with.",
                    "Start a new conversation, or load the model with a larger context length.")
            if tokens[-1] < 0:
                raise QuantDeskError("The prompt ends with an image, so there is no text to answer.",
                                     "Add some text after the image.")
        except QuantDeskError:
            if images is not None:
                images.close()
            raise
        return tokens, text, images

    def _start(self, request: dict, options: ChatOptions, free: list[Slot]) -> None:
        started = time.perf_counter()
        stats = ChatStats()
        constraint = output_constraint(options)  # a bad schema fails before any work
        tokens, text, images = self._tokens_of(request, options)
        stats.prompt_tokens = len(tokens)
        try:
            slot = self._place(tokens, request, free, stats)
        except BaseException:
            if images is not None:
                images.close()
            raise
        if images is not None:
            self.image_positions.update(images.position_counts())
        reused = min(common_prefix(slot.tokens, tokens), len(tokens) - 1)
        if images is not None:  # never keep half an image
            reused = images.whole_prefix(reused)
            stats.images = images.image_count
            stats.image_tokens = len(tokens) - _text_tokens(tokens)
        if reused < len(slot.tokens):
            llama_cpp.llama_memory_seq_rm(self.memory, slot.seq_id, self._position(slot, reused), -1)
            del slot.tokens[reused:]
        stats.prompt_tokens_reused = reused
        stats.prompt_tokens_evaluated = len(tokens) - reused
        reply = Reply(request, options, tokens, slot, self.model, stats, started,
                      prompt_opens_reasoning(text), constraint, images, self.step_cost)
        slot.reply = reply

    def _place(self, tokens: list[int], request: dict, free: list[Slot],
               stats: ChatStats) -> Slot:
        """The free slot for ``tokens``, holding the longest known prefix of them."""
        best = max(free, key=lambda s: (common_prefix(s.tokens, tokens), -len(s.tokens),
                                        -s.last_used))
        best_len = common_prefix(best.tokens, tokens)
        conversation_id = request.get("conversation_id")
        saved, saved_len = None, 0
        if conversation_id is not None and self.store is not None and \
                not any(s.conversation_id == conversation_id for s in free):
            try:
                saved = self.store.open(conversation_id, self.model.fingerprint)
                if saved is not None:
                    saved_len = common_prefix(saved.tokens, tokens)
            except SessionUnusable as exc:
                stats.session_notice = exc.notice
            if saved is None and not stats.session_notice and \
                    any(m.get("role") == "assistant" for m in request.get("messages") or ()):
                stats.session_notice = ("This conversation has no saved state; it was read "
                                        "again from its start.")
        entry, entry_len = self.cache.best_match(tokens)
        if max(saved_len, entry_len) <= best_len:
            self._stash(best, keep=best_len)
            return best
        victim = min(free, key=lambda s: (len(s.tokens) > 0, s.last_used))
        self._stash(victim, keep=0)
        if saved_len >= entry_len:
            try:
                payload = saved.read_payload()
            except SessionUnusable as exc:
                stats.session_notice = exc.notice
                return victim
            restored_tokens = saved.tokens
        else:
            payload = self.cache.payload(entry)
            restored_tokens = entry.tokens
        if payload is None or not restore_state(self.ctx, bytearray(payload), victim.seq_id):
            llama_cpp.llama_memory_seq_rm(self.memory, victim.seq_id, -1, -1)
            victim.tokens = []
            if saved_len >= entry_len:
                stats.session_notice = ("llama.cpp refused the saved state of this conversation; "
                                        "it was read again from its start.")
            return victim
        victim.tokens = list(restored_tokens)
        if saved_len >= entry_len:
            stats.session_restored = True
            self.store.touch(conversation_id)
        return victim

    def _stash(self, slot: Slot, keep: int) -> None:
        """Before ``slot`` keeps only ``keep`` tokens: copy its content to the prompt cache
        when that loses enough to be worth keeping. A conversation's content is not copied:
        its state is saved as the conversation's session after each reply already."""
        saved_elsewhere = slot.conversation_id is not None and self.store is not None
        if len(slot.tokens) - keep >= MIN_TOKENS and not saved_elsewhere:
            self.cache.add(list(slot.tokens), bytes(capture_state(self.ctx, slot.seq_id)))
        if keep == 0 and slot.tokens:
            llama_cpp.llama_memory_seq_rm(self.memory, slot.seq_id, -1, -1)
            slot.tokens = []
        slot.conversation_id = None

    # -- exclusive requests -------------------------------------------------------------

    def _run_exclusive(self, request: dict, options: ChatOptions) -> None:
        """Speculative or constrained decoding on slot 0, with the engine to itself."""
        model, slot = self.model, self.slots[0]
        for other in self.slots[1:]:
            # LoadedModel's decode (Llama.eval) clears positions past its prefix in every
            # sequence: keep the others' content in the prompt cache first.
            self._stash(other, keep=0)
        model.sync_cache(slot.tokens, slot.conversation_id)
        lane = request["lane"]
        try:
            stats = model.chat(
                request.get("messages"), options,
                cancelled=lambda: lane_cancelled(self.cancel, lane),
                emit=lambda text: self.send({"event": "delta", "id": request["id"], "text": text}),
                conversation_id=request.get("conversation_id"), store=self.store,
                prompt=request.get("prompt"))
        finally:
            slot.tokens = model.cached_tokens
            slot.conversation_id = model.conversation_id
            slot.last_used = time.monotonic()
        self.send({"event": "done", "id": request["id"], "stats": stats.to_dict()})
        conversation_id = request.get("conversation_id")
        if conversation_id is not None and self.store is not None:
            self.after_reply.append(lambda: model.save_session(self.store, conversation_id))

    # -- one step -----------------------------------------------------------------------

    def step(self) -> None:
        """Admit waiting requests, then decode one batch and pick each reply's next token."""
        take_abort(self.cancel)
        for slot in self.slots:
            if slot.reply is not None and lane_cancelled(self.cancel, slot.reply.lane):
                self._finish(slot.reply, "cancelled")
        if self.waiting:
            for request in [r for r in self.waiting if lane_cancelled(self.cancel, r["lane"])]:
                self.waiting.remove(request)  # cancelled before it had a slot
                self.send({"event": "done", "id": request["id"],
                           "stats": ChatStats(stop_reason="cancelled").to_dict()})
            self._admit()
        active = [s.reply for s in self.slots if s.reply is not None]
        for reply in active:
            if reply.images is not None and reply.reading_prompt:
                self._read_images(reply)
        active = [s.reply for s in self.slots if s.reply is not None]
        if not active:
            return
        # What each reply puts in the batch: generating ones their chosen tokens (and a
        # draft, planned for the whole step), then prompts, as much as fits.
        for reply in active:
            reply.draft = []
        space = self.capacity
        parts: dict[int, tuple[Reply, list[int], int]] = {}  # seq → reply, tokens, logits from
        generating = [r for r in active if not r.reading_prompt]
        for reply in generating:
            count = min(len(reply.pending), space)
            if count:
                parts[reply.slot.seq_id] = (reply, reply.pending[:count],
                                            len(reply.pending) - 1)
                space -= count
        self._plan_drafts(parts, space)
        space = self.capacity - sum(len(tokens) for _, tokens, _ in parts.values())
        for reply in active:
            if reply.reading_prompt and space > 0:
                end = len(reply.prompt)
                if reply.images is not None:  # text up to the next image, read on its own
                    end = reply.images.next_image(reply.next_prompt) or end
                if end == reply.next_prompt:
                    continue  # an image that failed or was cancelled this step
                count = min(end - reply.next_prompt, space)
                last = len(reply.prompt) - 1 - reply.next_prompt  # its index, if in this part
                parts[reply.slot.seq_id] = (reply, reply.prompt[reply.next_prompt:
                                                                reply.next_prompt + count], last)
                space -= count
        # In the order of the sequences: llama.cpp's micro-batches take consecutive ones.
        fillers = self._fillers(parts, space)
        batch, n, rows, counts = self.batch, 0, [], []
        for seq in sorted([*parts, *fillers]):
            if seq in fillers:
                slot = self.slots[seq]
                self._put(n, slot.tokens[-1] if slot.tokens else 0, fillers[seq], seq, False)
                counts.append((seq, 1))
                n += 1
                continue
            reply, tokens, logits_from = parts[seq]
            start = self._position(reply.slot)
            for i, token in enumerate(tokens):
                self._put(n + i, token, start + i, seq, i >= logits_from)
            count = len(tokens) - len(reply.draft) if not reply.reading_prompt else len(tokens)
            rows.append((reply, n + count - 1, count))
            counts.append((seq, len(tokens)))
            n += len(tokens)
        batch.n_tokens = n
        reading = any(reply.reading_prompt for reply, _, _ in rows)
        decoding = time.perf_counter()
        if reading:
            code = llama_cpp.llama_decode(self.ctx, batch)
        else:  # generation only (several replies, drafts): the generation threads
            with self.model.generation_threads():
                code = llama_cpp.llama_decode(self.ctx, batch)
        for seq, position in fillers.items():
            llama_cpp.llama_memory_seq_rm(self.memory, seq, position, -1)
        if code != 0:
            self._failed_step(rows, code)
            return
        now = time.perf_counter()
        if not reading:
            self.step_cost.add(ubatch_sizes(counts, self.model.n_ubatch, self.split_equal),
                               now - decoding)
        for reply, row, count in rows:
            slot = reply.slot
            if reply.reading_prompt:
                end = reply.next_prompt + count
                slot.tokens.extend(reply.prompt[reply.next_prompt:end])
                reply.next_prompt = end
                if reply.reading_prompt:
                    continue
                reply.prefill_end = now
                stats = reply.stats
                stats.prefill_seconds = now - reply.started
                stats.prefill_tokens_per_second = \
                    stats.prompt_tokens_evaluated / max(stats.prefill_seconds, 1e-9)
            else:
                slot.tokens.extend(reply.pending[:count])
                del reply.pending[:count]
                if reply.pending:
                    continue  # a forced run longer than the batch: the rest goes next
            if reply.steps is not None:
                self._pick_constrained(reply, row, now)
            else:
                self._pick(reply, row, now)
        self._send_deltas(now)

    def _read_images(self, reply: Reply) -> None:
        """Evaluate the images that come next in ``reply``'s prompt, each in a decode of its
        own (its cells are whole: one image, one call), into its slot's sequence."""
        slot, vision = reply.slot, self.model.vision
        while reply.reading_prompt and reply.next_prompt in reply.images.spans:
            if lane_cancelled(self.cancel, reply.lane):
                return
            span = reply.images.spans[reply.next_prompt]
            try:
                encode, decode = vision.evaluate(span, self.ctx, self._position(slot), slot.seq_id,
                                                 self.capacity)
            except QuantDeskError as exc:
                llama_cpp.llama_memory_seq_rm(self.memory, slot.seq_id, self._position(slot), -1)
                if getattr(exc, "code", None) == 2:
                    return  # aborted by a cancel: the reply ends at the next step
                slot.reply = None
                reply.close()
                llama_cpp.llama_memory_seq_rm(self.memory, slot.seq_id, -1, -1)
                slot.tokens = []
                self._error(reply.id, exc)
                return
            slot.tokens.extend(reply.prompt[span.start:span.start + span.n_tokens])
            reply.next_prompt = span.start + span.n_tokens
            reply.stats.images_encoded += span.last  # a tiled picture counts once, when whole
            reply.stats.image_encode_seconds += encode

    def _put(self, i: int, token: int, pos: int, seq_id: int, logits: bool) -> None:
        batch = self.batch
        batch.token[i] = token
        batch.pos[i] = pos
        batch.n_seq_id[i] = 1
        batch.seq_id[i][0] = seq_id
        batch.logits[i] = logits

    def _failed_step(self, rows: list, code: int) -> None:
        """llama_decode did not finish: cancelled (2), or a real failure."""
        for reply, _, _ in rows:  # whatever of this batch reached the cache goes again
            slot = reply.slot
            llama_cpp.llama_memory_seq_rm(self.memory, slot.seq_id, self._position(slot), -1)
        if code == 2:  # aborted: the cancelled replies end at the next step, others retry
            return
        for reply, _, _ in rows:
            slot = reply.slot
            slot.reply = None
            reply.close()
            llama_cpp.llama_memory_seq_rm(self.memory, slot.seq_id, -1, -1)
            slot.tokens = []
            self._error(reply.id, QuantDeskError(
                f"llama.cpp failed to evaluate the conversation (llama_decode returned {code}).",
                "Send the message again; if it keeps failing, reload the model with a "
                "smaller context or fewer slots."))

    def _fillers(self, parts: dict, space: int) -> dict[int, int]:
        """Sequences between the batch's that have nothing in it, when a token of each
        (removed again after the decode) makes the step cheaper: with a KV stream per
        slot, llama.cpp's micro-batches take consecutive sequences only, so a step of
        slots 0, 2 and 3 is two passes over the weights, and with slot 1's filler one.
        Sequence → the filler's position (its cache's end)."""
        if not self.split_equal or not parts or space < 1:
            return {}
        seqs = sorted(parts)
        gaps = {}
        for seq in range(seqs[0], seqs[-1]):
            slot = self.slots[seq]
            if seq not in parts and len(slot.tokens) + 1 < self.model.n_ctx:
                gaps[seq] = self._position(slot)
        if not gaps or len(gaps) > space:
            return {}
        counts = [(seq, len(parts[seq][1])) for seq in seqs]
        filled = sorted(counts + [(seq, 1) for seq in gaps])
        units = self.step_cost.units
        n_ubatch = self.model.n_ubatch
        if units(ubatch_sizes(filled, n_ubatch, True)) < units(ubatch_sizes(counts, n_ubatch, True)):
            return gaps
        return {}

    def _plan_drafts(self, parts: dict, space: int) -> None:
        """The drafts of this step (``reply.draft``, added to the reply's part of the batch):
        each generating reply (``parts``, by sequence) with all its chosen tokens there
        offers one, and
        :func:`~models.engine.speculation.plan_drafts` chooses which are verified, and how
        long, for the step as a whole; a draft left out is watched instead. At most
        ``space`` tokens in all."""
        order = sorted(parts)
        counts = [(seq, len(parts[seq][1])) for seq in order]
        drafts, offers = {}, {}
        for index, seq in enumerate(order):
            reply, tokens, _ = parts[seq]
            if reply.drafter is not None and len(tokens) == len(reply.pending):
                draft = self._draft(reply, space)
                if draft:
                    drafts[index] = draft
                    offers[index] = reply.drafter.offered
        if not offers:
            return
        plan = plan_drafts(counts, offers, self.step_cost, self.model.n_ubatch, self.split_equal)
        for index, draft in drafts.items():
            reply, tokens, _ = parts[order[index]]
            length = min(plan.get(index, 0), space)
            if length:
                reply.draft = draft[:length]
                tokens.extend(reply.draft)
                space -= length
            else:
                reply.drafter.watch(draft)

    def _draft(self, reply: Reply, space: int) -> list[int]:
        """The draft ``reply`` offers after its pending tokens: at most ``space`` (the
        batch's room), and none the reply could not use (its token budget, its slot's
        context) or that would make the reply's tokens in the step too many to decode as
        plain decoding does (:data:`~models.engine.speculation.MOST_STEP_TOKENS`); a
        constrained reply's draft ends where the grammar refuses a token."""
        slot, stats = reply.slot, reply.stats
        room = min(space, self.model.n_ctx - len(slot.tokens) - len(reply.pending) - 1,
                   reply.options.max_tokens - stats.completion_tokens,
                   MOST_STEP_TOKENS - len(reply.pending))
        if reply.steps is not None:
            if not reply.first_token_at:
                return []  # the grammar's first plan has not run yet
            room = min(room, reply.steps.max_tokens - reply.steps.stats.tokens)
        draft = reply.drafter.propose(slot.tokens, reply.pending, room)
        if draft and reply.steps is not None:
            draft = draft[:reply.steps.valid_prefix(draft)]
        return draft

    def _settle_draft(self, reply: Reply, draft: list[int], accepted: int) -> None:
        """After a verified draft: count it, and remove the cells of its rejected tokens
        (or of all that were not needed, when the reply ended) from the slot's cache."""
        stats, slot = reply.stats, reply.slot
        stats.draft_tokens += len(draft)
        stats.accepted_tokens += accepted
        stats.acceptance_rate = stats.accepted_tokens / stats.draft_tokens
        reply.drafter.update(len(draft), accepted)
        if accepted < len(draft) or slot.reply is not reply:
            llama_cpp.llama_memory_seq_rm(self.memory, slot.seq_id, self._position(slot), -1)

    def _pick(self, reply: Reply, row: int, now: float) -> None:
        """Sample the reply's next token from its row of logits and handle it; with a
        draft in the batch, go on through the draft's rows while the picks equal it (the
        equal draft tokens are in the cache already, as plain decoding would have put
        them there)."""
        draft = reply.draft
        reply.stats.decode_passes += 1
        accepted = 0
        for index in range(len(draft) + 1):
            token = reply.sampler.sample(self.ctx, row + index)
            if not self._take(reply, token, row + index, now):
                break
            if index < len(draft) and token == draft[index]:
                reply.slot.tokens.append(token)
                accepted += 1
                continue
            reply.pending = [token]
            if not draft and reply.drafter is not None:
                reply.drafter.observe(reply.pending)  # a watched draft, if any
            break
        if draft:
            reply.draft = []
            self._settle_draft(reply, draft, accepted)

    def _take(self, reply: Reply, token: int, row: int, now: float) -> bool:
        """Handle a picked token: its text, stop strings and limits; False when it ended
        the reply."""
        stats, options = reply.stats, reply.options
        reply.last_token_at = now
        if not reply.first_token_at:
            reply.first_token_at = now
            stats.time_to_first_token = now - reply.started
        if not options.ignore_eos and self.model.is_end_of_generation(token):
            self._finish(reply, "stop")
            return False
        stats.completion_tokens += 1
        if options.logprobs is not None:
            reply.out_logprobs.append(self._logprobs(reply, row, token, options.logprobs))
        piece = reply.decoder.feed(token)
        if reply.reasoning is not None:
            self._count_reasoning(reply, piece)
        text = reply.stops.push(piece)
        if text:
            reply.out_text.append(text)
        if reply.stops.stopped:
            self._finish(reply, "stop_string")
            return False
        if stats.completion_tokens >= options.max_tokens:
            self._finish(reply, "length")
            return False
        if len(reply.slot.tokens) + 1 >= self.model.n_ctx:
            self._finish(reply, "context_full")
            return False
        return True

    def _pick_constrained(self, reply: Reply, row: int, now: float) -> None:
        """Structured output: the grammar's pick from the reply's row, then whatever the
        grammar forces after it, which the next batch evaluates with it."""
        steps, stats = reply.steps, reply.stats
        if reply.first_token_at == 0.0 and not steps.stats.tokens:
            # Right after the prompt: the grammar may force the reply's first tokens.
            self._emit_constrained(reply, steps.plan())
            if steps.stats.stop_reason:
                self._finish(reply, "stop")
                return
            if steps.pending:
                reply.first_token_at = now
                stats.time_to_first_token = now - reply.started
                reply.pending, steps.pending = steps.pending, []
                return
        stats.decode_passes += 1
        draft, accepted = reply.draft, 0
        for index in range(len(draft) + 1):
            text = steps.pick(row + index)
            reply.last_token_at = now
            if not reply.first_token_at:
                reply.first_token_at = now
                stats.time_to_first_token = now - reply.started
            self._emit_constrained(reply, text)
            if not steps.stats.stop_reason:
                self._emit_constrained(reply, steps.plan())
            if steps.stats.stop_reason:
                self._finish(reply, "stop")
                break
            if index < len(draft) and steps.pending[0] == draft[index]:
                # The pick is the draft token, whose cells are in the cache: what the
                # grammar forces after it (if anything) goes next; else the next row.
                reply.slot.tokens.append(steps.pending.pop(0))
                accepted += 1
                if not steps.pending:
                    continue
            reply.pending, steps.pending = steps.pending, []
            if not draft and reply.drafter is not None:
                reply.drafter.observe(reply.pending)  # a watched draft, if any
            break
        if draft:
            reply.draft = []
            self._settle_draft(reply, draft, accepted)

    @staticmethod
    def _emit_constrained(reply: Reply, text: str) -> None:
        if text:
            reply.text.append(text)
            reply.out_text.append(text)

    @staticmethod
    def _end_constrained(reply: Reply, reason: str) -> str:
        """Structured output's stats and validation as the reply ends; its stop reason."""
        steps, stats = reply.steps, reply.stats
        steps.close()
        g = steps.stats
        stats.completion_tokens = g.tokens
        stats.forced_tokens = g.forced_tokens
        stats.closed_at_budget = g.closed_at_budget
        if reason == "stop" and g.stop_reason == "max_tokens":
            reason = "length" if reply.options.max_tokens <= reply.room else "context_full"
        try:
            reply.constraint.check("".join(reply.text))
            stats.valid = True
        except QuantDeskError as exc:
            stats.valid, stats.validation_error = False, exc.what
        reply.steps = None
        return reason

    @staticmethod
    def _count_reasoning(reply: Reply, piece: str) -> None:
        splitter = reply.reasoning
        splitter.feed(piece)
        reply.stats.reasoning_tokens = splitter.reasoning_pieces
        if splitter.in_answer:  # the rest is answer: stop looking
            reply.stats.reasoning_seconds = splitter.seconds or 0.0
            reply.reasoning = None

    def _logprobs(self, reply: Reply, row: int, token: int, top: int) -> dict:
        """The picked token's log-probability and the ``top`` likeliest alternatives."""
        pointer = llama_cpp.llama_get_logits_ith(self.ctx, row)
        logits = np.ctypeslib.as_array(pointer, shape=(self.n_vocab,)).astype(np.float64)
        peak = logits.max()
        logsumexp = peak + np.log(np.exp(logits - peak).sum())
        entry = self._token_entry(reply, token, float(logits[token] - logsumexp))
        alternatives = []
        if top > 0:
            count = min(top, MAX_TOP_LOGPROBS)
            best = np.argpartition(-logits, count)[:count]
            best = best[np.argsort(-logits[best])]
            alternatives = [self._token_entry(reply, int(t), float(logits[t] - logsumexp))
                            for t in best]
        entry["top_logprobs"] = alternatives
        return entry

    @staticmethod
    def _token_entry(reply: Reply, token: int, logprob: float) -> dict:
        piece = reply.decoder.piece(token)
        return {"token": piece.decode("utf-8", "replace"), "bytes": list(piece),
                "logprob": logprob}
