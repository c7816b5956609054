"""The model inside the engine process: load, self-test, and chat at the token level.

Runs only in the engine's child process (see :mod:`models.engine`). It drives
:class:`llama_cpp.Llama` token by token instead of through ``create_chat_completion`` so
that it controls three things:

- **Prompt reuse.** The KV cache holds the tokens of the previous turn (its prompt and
  its reply). The new prompt is tokenized, the common prefix with the cached tokens is
  kept, and only the rest is evaluated; :class:`ChatStats` reports both counts.
- **Cancel.** A shared flag is checked between prompt batches and between tokens, and by
  llama.cpp itself between graph nodes (``cancel_flag``), so a reply stops within
  milliseconds, even in the middle of a long prompt, and keeps what it had.
- **Timings.** Time to first token, prefill and decode speeds, measured here, beside the
  work, without the pipe's latency.
- **Speculative decoding with a draft model.** With ``speculative="draft_model"`` the
  tokens after each picked one are guessed by the small model loaded beside this one
  (``draft_model``) and checked in one batch; the reply is the same, the cache and
  ``input_ids`` hold the same tokens as with plain decoding, and :class:`ChatStats`
  reports drafted and accepted tokens. (Prompt lookup drafts inside the batching loop.)

``use_extra_bufts``, ``progress_callback`` and ``devices`` are fields of llama.cpp's model
params, but ``Llama()`` in llama-cpp-python 0.3.36 has no argument for them (an unknown
keyword is silently ignored), so :func:`_model_params_override` sets them on the params
``Llama()`` asks for while the model loads — ``devices`` to the remote workers' devices
and this computer's GPUs when the load names workers (:mod:`models.rpc.devices`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections import deque
from pathlib import Path
from typing import Callable, Iterator, Optional

import llama_cpp
import llama_cpp.llama_cpp as llama_low
import numpy as np

from models.engine.chat_template import PRESETS, guess_preset, render_chat
from models.engine.draft_model import MOST_DRAFT_MODEL_TOKENS, DraftModel
from models.engine.embedding import embed, embedding_params
from models.engine.expert_offload import keep_experts_on_cpu
from models.engine.llama_log import LlamaLogCapture, parse_offload_report
from models.engine.options import ChatOptions, ChatStats
from models.engine.prompt_cache import common_prefix
from models.engine.prompt_lookup import DraftBatch, truncate_cache
from models.engine.sessions import (SessionStore, SessionUnusable, capture_state, restore_state,
                                    session_fingerprint)
from models.engine.settings import KV_CACHE_TYPES, LoadSettings
from models.engine.token_stream import Sampler, StopFilter, TokenTextDecoder
from models.engine.vision import ImagePrompt, VisionEncoder
from models.foundation.errors import QuantDeskError
from models.rpc.devices import use_remote_devices

log = logging.getLogger(__name__)

# Test hook: when this variable is "selftest-extra-bufts", the engine aborts the process
# during the load self-test if use_extra_bufts is on, imitating the AMX crash of DESIGN.md
# so tests can drive the real fallback path. Nothing else reads it.
TEST_CRASH_ENV = "QUANTDESK_ENGINE_TEST_CRASH"


@contextlib.contextmanager
def _model_params_override(use_extra_bufts: bool,
                           on_progress: Optional[Callable[[float], None]] = None,
                           parallel: int = 1, cpu_moe_layers: int = 0,
                           endpoints: tuple[str, ...] = (),
                           device_names: Optional[list[str]] = None) -> Iterator[None]:
    """While ``Llama()`` builds its params, set ``use_extra_bufts`` on the model params,
    llama.cpp's load progress callback (fraction of the tensors read, 0 to 1) when
    ``on_progress`` is given, and on the context params one sequence per slot, each with a
    KV cache of its own (``kv_unified`` off: a sequence's attention reads its own cells
    only, so idle slots' caches cost nothing per token), and for a mixture-of-experts model
    the tensor overrides that keep the first ``cpu_moe_layers`` layers' experts in RAM;
    with remote ``endpoints``, the model's device list (their names go to ``device_names``)."""
    original = llama_low.llama_model_default_params
    original_context = llama_low.llama_context_default_params

    def progress(fraction: float, _user_data) -> bool:
        try:
            on_progress(fraction)
        except Exception:  # a callback error must not unwind through llama.cpp's C frames
            log.exception("load progress callback failed")
        return True  # go on loading

    callback = llama_low.llama_progress_callback(progress) if on_progress is not None else None

    def with_override():
        params = original()
        params.use_extra_bufts = use_extra_bufts
        keep_experts_on_cpu(params, cpu_moe_layers)
        names = use_remote_devices(params, endpoints)
        if device_names is not None:
            device_names[:] = names
        if callback is not None:
            params.progress_callback = callback  # kept alive by this frame until the load ends
        return params

    def context_with_slots():
        params = original_context()
        if parallel > 1:
            params.n_seq_max = parallel
            params.kv_unified = False
        return params

    llama_low.llama_model_default_params = with_override
    llama_low.llama_context_default_params = context_with_slots
    try:
        yield
    finally:
        llama_low.llama_model_default_params = original
        llama_low.llama_context_default_params = original_context


class LoadedModel:
    """One model loaded by llama.cpp in this process.

    Args:
        path: The GGUF file.
        settings: Validated :class:`LoadSettings` (auto values already resolved).
        log_capture: The process's llama.cpp log capture, for the offload report.
    """

    def __init__(self, path: str, settings: LoadSettings, log_capture: LlamaLogCapture,
                 on_progress: Optional[Callable[[float], None]] = None,
                 endpoints: tuple[str, ...] = ()) -> None:
        self.path = path
        self.settings = settings
        #: Remote devices as llama.cpp named them, e.g. ``"RPC0 (127.0.0.1:41234)"``.
        self.device_names: list[str] = []
        mark = log_capture.mark()
        started = time.perf_counter()
        # An embedding load: embeddings on, pooled, a batch of a whole context (embedding.py).
        batches = dict(n_batch=settings.batch_size, n_ubatch=settings.micro_batch_size)
        if settings.embedding:
            batches = embedding_params(path, settings.context_length)
        try:
            with _model_params_override(settings.use_extra_bufts, on_progress, settings.parallel,
                                        settings.cpu_moe_layers, tuple(endpoints),
                                        self.device_names):
                self.llm = llama_cpp.Llama(
                    model_path=path,
                    n_gpu_layers=settings.gpu_layers,
                    main_gpu=settings.main_gpu,
                    n_threads=settings.threads,
                    n_threads_batch=settings.batch_threads,
                    n_ctx=settings.context_length * settings.parallel,
                    **batches,
                    flash_attn=settings.flash_attention,
                    type_k=KV_CACHE_TYPES[settings.kv_cache_type_k],
                    type_v=KV_CACHE_TYPES[settings.kv_cache_type_v],
                    use_mmap=settings.use_mmap,
                    use_mlock=settings.use_mlock,
                    tensor_split=list(settings.device_split) or None,
                    verbose=False,
                )
                self.draft: Optional[DraftModel] = None
                self.vision: Optional[VisionEncoder] = None
                try:
                    if settings.draft_model:
                        self.draft = DraftModel(settings.draft_model, self.llm, settings)
                    if settings.mmproj:
                        self.vision = VisionEncoder(settings.mmproj, self.llm.model,
                                                    use_gpu=settings.gpu_layers != 0,
                                                    threads=settings.batch_threads or 1)
                except QuantDeskError:
                    if self.draft is not None:
                        self.draft.close()
                    self.llm.close()
                    raise
        except (ValueError, RuntimeError) as exc:
            reason = log_capture.first_error(mark) or str(exc)
            raise QuantDeskError(
                f"llama.cpp could not load {Path(path).name}: {reason}.",
                "If the file is incomplete, download or convert it again; if memory ran out, "
                "choose a smaller context or fewer GPU layers. The log has llama.cpp's full "
                "report.",
            ) from exc
        self.abort_hook = None  # set by the engine loop (cancel_flag.install_abort_hook)
        # Which conversation the KV cache holds (None: none, or an anonymous chat), and
        # what a saved state of it must match to be restored (see ``sessions``).
        self.conversation_id: Optional[str] = None
        self.fingerprint = session_fingerprint(path, settings, llama_cpp.__version__)
        self.load_seconds = time.perf_counter() - started
        self.offload = parse_offload_report(log_capture.lines_since(mark))
        for name in self.device_names:  # "RPC0 (127.0.0.1:50052)" → RPC0: the endpoint
            device, _, endpoint = name.partition(" (")
            self.offload.device_labels[device] = endpoint.rstrip(")")
        if self.offload.layers_total == 0:
            # A build without GPU offload support does not log the layer split: all of
            # the blocks and the output layer stay on the CPU.
            self.offload.layers_total = llama_low.llama_model_n_layer(self.llm.model) + 1
        self.vocab = llama_low.llama_model_get_vocab(self.llm.model)
        self.token_pieces: dict[int, bytes] = {}  # token → its text bytes, for every reply
        self._end_tokens: dict[int, bool] = {}  # token → whether it ends a turn
        self.parallel = settings.parallel
        self.n_ctx = self.llm.n_ctx() // settings.parallel  # per slot
        self.n_batch = self.llm.n_batch
        self.n_ubatch = settings.micro_batch_size
        self.bos_id = llama_low.llama_vocab_bos(self.vocab)
        self.eos_id = llama_low.llama_vocab_eos(self.vocab)
        self.bos_text = self._token_text(self.bos_id)
        self.eos_text = self._token_text(self.eos_id)
        template = self.llm.metadata.get("tokenizer.chat_template")
        if template:
            self.template, self.template_name, self.preset_stops = template, "the model's own", ()
        else:
            arch = self.llm.metadata.get("general.architecture", "")
            preset = guess_preset(arch, self._is_single_token)
            self.template, self.template_name, self.preset_stops = (
                preset.template, preset.name, preset.stop)

    def _token_text(self, token: int) -> str:
        if token < 0:
            return ""
        return llama_low.llama_vocab_get_text(self.vocab, token).decode("utf-8", "replace")

    def _is_single_token(self, text: str) -> bool:
        return len(self.llm.tokenize(text.encode(), add_bos=False, special=True)) == 1

    @property
    def cached_tokens(self) -> list[int]:
        """Tokens whose keys and values are in the KV cache, in order."""
        return self.llm.input_ids[: self.llm.n_tokens].tolist()

    def self_test(self) -> None:
        """Decode one token, so a kernel that crashes does so now and not mid-chat."""
        if os.environ.get(TEST_CRASH_ENV) == "selftest-extra-bufts" and self.settings.use_extra_bufts:
            log.warning("test hook %s: aborting during the self-test", TEST_CRASH_ENV)
            os.abort()
        if self.settings.embedding:
            embed(self, ["Hello"])
            return
        tokens = [self.bos_id] if self.bos_id >= 0 else self.llm.tokenize(b"Hello", add_bos=False)
        self.llm.n_tokens = 0
        self.llm.eval(tokens)
        with Sampler(ChatOptions(temperature=0.0), self.llm.n_vocab()) as sampler:
            sampler.sample(self.llm.ctx)
        self.llm.n_tokens = 0  # the next eval drops these cells from the KV cache
        if self.draft is not None:
            self.draft.llm.n_tokens = 0
            self.draft.llm.eval(tokens)
            self.draft.llm.n_tokens = 0

    def render(self, messages: list[dict], thinking: Optional[bool] = None,
               tools: Optional[list] = None) -> str:
        """The prompt text for ``messages``, ending with the assistant's turn opening;
        ``thinking`` turns a reasoning model's thinking on or off (``None``: its default);
        ``tools`` reach a template that reads them."""
        extra = {"tools": tools} if tools else {}
        return render_chat(self.template, messages, bos_token=self.bos_text,
                           eos_token=self.eos_text, add_generation_prompt=True,
                           thinking=thinking, **extra)

    def tokenize_prompt(self, prompt: str) -> list[int]:
        """Tokens of a rendered prompt; BOS added only if the vocabulary wants it and the
        template did not already write it (llama.cpp warns about a doubled BOS)."""
        return self.llm.tokenize(prompt.encode("utf-8"), add_bos=self._adds_bos(prompt), special=True)

    def _adds_bos(self, prompt: str) -> bool:
        add_bos = bool(llama_low.llama_vocab_get_add_bos(self.vocab))
        if add_bos and self.bos_text and prompt.startswith(self.bos_text):
            return False
        return add_bos

    def prompt_with_images(self, messages: list[dict], thinking: Optional[bool] = None,
                           tools: Optional[list] = None) -> tuple[ImagePrompt, str]:
        """A conversation with images, tokenized into text and image chunks
        (:mod:`models.engine.vision`); each image sits where its marker is, the text
        around it joined to it with nothing between, as llama-server lays it out."""
        from models.images import content_text, message_images

        if self.vision is None:
            raise QuantDeskError(
                f"{Path(self.path).name} was loaded without a vision encoder, so it cannot read "
                "images.", "Load the model with its mmproj file (found beside the model, or "
                "chosen with --mmproj), or send text only.")
        images = [image for m in messages for image in message_images(m["content"])]
        flat = [{**m, "content": content_text(m["content"], self.vision.marker)} for m in messages]
        text = self.render(flat, thinking, tools)
        return self.vision.tokenize(text, images, self._adds_bos(text)), text

    def is_end_of_generation(self, token: int) -> bool:
        """Whether ``token`` ends the model's turn (EOS, end of turn...); asked of llama.cpp
        once per token id (this runs for every generated token)."""
        known = self._end_tokens.get(token)
        if known is None:
            known = self._end_tokens[token] = bool(llama_low.llama_vocab_is_eog(self.vocab, token))
        return known

    def sync_cache(self, tokens: list[int], conversation_id: Optional[str]) -> None:
        """Tell ``Llama`` what sequence 0 holds (the batching loop decodes around it)."""
        self.llm.input_ids[: len(tokens)] = tokens
        self.llm.n_tokens = len(tokens)
        self.conversation_id = conversation_id

    def _evaluate(self, tokens: list[int], cancelled: Callable[[], bool]) -> bool:
        """Evaluate ``tokens``; False when cancel aborted it (see ``cancel_flag``)."""
        try:
            self.llm.eval(tokens)
            return True
        except RuntimeError as exc:
            # llama_decode failed (2 = aborted): llama.cpp dropped the unfinished batch
            # from the KV cache and Llama.eval did not count it, so the cache stays valid.
            if cancelled():
                return False
            self.llm.n_tokens = 0
            raise QuantDeskError(f"llama.cpp failed to evaluate the conversation ({exc}).",
                                 "Start a new conversation, or reload the model.") from exc

    def _restore_session(self, store: SessionStore, conversation_id: str, tokens: list[int],
                         has_history: bool, stats: ChatStats) -> None:
        """Load the conversation's saved state into the KV cache if it beats what is there.

        Every failure leaves a valid cache (the old one, or an empty one) and a notice.
        """
        try:
            saved = store.open(conversation_id, self.fingerprint)
            if saved is None:
                if has_history:
                    stats.session_notice = ("This conversation has no saved state; it was read "
                                            "again from its start.")
                return
            usable = common_prefix(saved.tokens, tokens)
            if usable <= common_prefix(self.cached_tokens, tokens) or \
                    len(saved.tokens) >= self.n_ctx:
                return  # the cache already holds as much of this conversation
            payload = saved.read_payload()
        except SessionUnusable as exc:
            log.info("session %s not restored: %s", conversation_id, exc.notice)
            stats.session_notice = exc.notice
            return
        if not restore_state(self.llm.ctx, payload):
            self.llm.n_tokens = 0  # llama.cpp emptied sequence 0; the next eval starts clean
            stats.session_notice = ("llama.cpp refused the saved state of this conversation; "
                                    "it was read again from its start.")
            return
        self.llm.input_ids[: len(saved.tokens)] = saved.tokens
        self.llm.n_tokens = len(saved.tokens)
        store.touch(conversation_id)
        stats.session_restored = True

    def save_session(self, store: SessionStore, conversation_id: str) -> None:
        """Save what the KV cache holds as the conversation's state (after a reply)."""
        if self.conversation_id != conversation_id or self.llm.n_tokens == 0:
            return
        started = time.perf_counter()
        path = store.save(conversation_id, self.fingerprint, self.cached_tokens,
                          capture_state(self.llm.ctx))
        log.info("session %s saved: %d tokens in %.3f s", path.name, self.llm.n_tokens,
                 time.perf_counter() - started)

    def chat(self, messages: Optional[list[dict]], options: ChatOptions,
             cancelled: Callable[[], bool], emit: Callable[[str], None],
             conversation_id: Optional[str] = None, store: Optional[SessionStore] = None,
             prompt: Optional[str] = None) -> ChatStats:
        """Generate a reply on sequence 0, calling ``emit(text)`` for each delta; return
        its stats. The batching loop (``batching.py``) runs every other reply itself and
        hands the ones a draft model speculates for here.
        ``prompt`` is a raw prompt used instead of rendering ``messages``.

        With a ``conversation_id`` (and a ``store``), a cache that holds another
        conversation is first replaced by this conversation's saved state when that
        saves work; saving after the reply is :meth:`save_session`, called by the
        engine loop once the reply is sent.

        Raises:
            QuantDeskError: The conversation does not fit the context.
        """
        stats = ChatStats()
        started = time.perf_counter()
        tokens = self.tokenize_prompt(prompt if prompt is not None
                                      else self.render(messages, options.thinking,
                                                                  options.tools))
        stats.prompt_tokens = len(tokens)
        if len(tokens) >= self.n_ctx:
            raise QuantDeskError(
                f"The conversation is {len(tokens)} tokens long, more than the "
                f"{self.n_ctx}-token context the model was loaded with.",
                "Start a new conversation, or load the model with a larger context length.",
            )
        if conversation_id is not None and store is not None \
                and conversation_id != self.conversation_id:
            has_history = any(m["role"] == "assistant" for m in messages or ())
            self._restore_session(store, conversation_id, tokens, has_history, stats)
        self.conversation_id = conversation_id
        reused = common_prefix(self.cached_tokens, tokens)
        reused = min(reused, len(tokens) - 1)  # at least one token must produce logits
        self.llm.n_tokens = reused  # the next eval removes the KV cells after the prefix
        stats.prompt_tokens_reused = reused
        stats.prompt_tokens_evaluated = len(tokens) - reused
        for start in range(reused, len(tokens), self.n_batch):
            if cancelled() or not self._evaluate(tokens[start: start + self.n_batch], cancelled):
                stats.stop_reason = "cancelled"
                return stats
        prefill_end = time.perf_counter()
        stats.prefill_seconds = prefill_end - started
        stats.prefill_tokens_per_second = stats.prompt_tokens_evaluated / max(stats.prefill_seconds, 1e-9)

        decoder = TokenTextDecoder(self.vocab, self.token_pieces)
        stops = StopFilter(tuple(options.stop) + self.preset_stops)
        first = last = prefill_end
        decoded = -1  # tokens picked after the first one
        # Tokens picked but not yet handled, oldest first. Only the last of them can be
        # missing from the KV cache: the others are confirmed draft tokens, already there.
        picked: deque[int] = deque()
        if options.speculative != "draft_model":
            raise QuantDeskError("This path decodes draft-model replies only.",
                                 "Send other replies through the engine's batching loop.")
        with Sampler(options, self.llm.n_vocab()) as sampler, self.generation_threads(), \
                DraftBatch(min(options.draft_tokens, MOST_DRAFT_MODEL_TOKENS, self.n_batch - 1)
                           + 1) as drafts:
            stats.seed = sampler.seed
            picked.append(sampler.sample(self.llm.ctx))
            while True:
                token = picked.popleft()
                position = len(tokens) + stats.completion_tokens  # where ``token`` goes
                last = time.perf_counter()
                decoded += 1
                if stats.completion_tokens == 0:
                    first = last
                    stats.time_to_first_token = first - started
                if not options.ignore_eos and self.is_end_of_generation(token):
                    stats.stop_reason = "stop"
                    break
                stats.completion_tokens += 1
                text = stops.push(decoder.feed(token))
                if text:
                    emit(text)
                if stops.stopped:
                    stats.stop_reason = "stop_string"
                    break
                if stats.completion_tokens >= options.max_tokens:
                    stats.stop_reason = "length"
                    break
                if position + 1 >= self.n_ctx:
                    stats.stop_reason = "context_full"
                    break
                if picked:
                    continue  # a confirmed draft token: already in the KV cache
                if cancelled():
                    stats.stop_reason = "cancelled"
                    break
                room = min(drafts.capacity - 1, self.n_ctx - position - 2,
                           options.max_tokens - stats.completion_tokens)
                history = np.append(self.llm.input_ids[:position], token)
                draft = self._propose(options, history, room, cancelled, stats)
                if not self._verify(drafts, token, draft, position, sampler, picked, stats,
                                    cancelled):
                    stats.stop_reason = "cancelled"
                    break
            # Plain decoding leaves every handled token but the last in the cache; confirmed
            # draft tokens past the end of the reply must not stay there.
            if self.llm.n_tokens > position:
                self.llm.n_tokens = position
                truncate_cache(self.llm.ctx, position)
        if stats.draft_tokens:
            stats.acceptance_rate = stats.accepted_tokens / stats.draft_tokens
        tail = stops.push(decoder.flush()) + stops.flush()
        if tail:
            emit(tail)
        stats.decode_seconds = last - first
        stats.decode_tokens_per_second = decoded / stats.decode_seconds if decoded > 0 else 0.0
        return stats

    def _propose(self, options: ChatOptions, history: np.ndarray, room: int,
                 cancelled: Callable[[], bool], stats: ChatStats) -> list[int]:
        """The draft model's guess to verify after ``history``."""
        if self.draft is None:
            raise QuantDeskError("No draft model is loaded with this model.",
                                 "Load the model again with a draft model.")
        started = time.perf_counter()
        draft = self.draft.propose(history, room, cancelled)
        stats.draft_seconds += time.perf_counter() - started
        return draft

    def _verify(self, drafts: DraftBatch, token: int, draft: list[int], position: int,
                sampler: Sampler, picked: deque, stats: ChatStats,
                cancelled: Callable[[], bool]) -> bool:
        """Evaluate ``token`` and its ``draft`` in one batch; queue the picks the draft earns.

        The sampler picks from the logits after ``token`` and after each draft token in
        turn, as plain decoding would; the draft token counts while the pick equals it.
        The first differing pick (or the pick after a fully confirmed draft) ends the
        run, and the cells of the rejected draft tokens leave the KV cache, so the cache
        and ``input_ids`` hold exactly the handled tokens. False when cancel aborted it.
        """
        batch = [token] + draft
        stats.decode_passes += 1
        code = drafts.decode(self.llm.ctx, batch, position)
        if code != 0:
            # Like a failed Llama.eval: llama.cpp dropped the unfinished batch's cells.
            truncate_cache(self.llm.ctx, position)
            self.llm.n_tokens = position
            if cancelled():
                return False
            self.llm.n_tokens = 0
            raise QuantDeskError(f"llama.cpp failed to evaluate the conversation (llama_decode "
                                 f"returned {code}).", "Start a new conversation, or reload the model.")
        accepted = 0
        for index in range(len(batch)):
            choice = sampler.sample(self.llm.ctx, index)
            picked.append(choice)
            if index == len(draft) or choice != draft[index]:
                break
            accepted += 1
        kept = position + 1 + accepted  # ``token`` and the confirmed draft tokens
        self.llm.input_ids[position: kept] = batch[: accepted + 1]
        self.llm.n_tokens = kept
        if accepted < len(draft):
            truncate_cache(self.llm.ctx, kept)
        stats.draft_tokens += len(draft)
        stats.accepted_tokens += accepted
        return True

    @contextlib.contextmanager
    def generation_threads(self) -> Iterator[None]:
        """While generating, decodes of several tokens (a draft and the token before it,
        several replies' tokens) run on the generation threads, not the prompt's.

        llama.cpp gives every decode of more than one token its batch threads, which are
        meant for reading prompts (all cores by default): on a machine whose cores are
        busy, a small step split over more threads than the generation's waits at each
        barrier for a preempted thread, and a two-token step took ten times a one-token
        one."""
        ctx = self.llm.ctx
        threads, batch_threads = llama_low.llama_n_threads(ctx), llama_low.llama_n_threads_batch(ctx)
        if threads == batch_threads:
            yield
            return
        llama_low.llama_set_n_threads(ctx, threads, threads)
        try:
            yield
        finally:
            llama_low.llama_set_n_threads(ctx, threads, batch_threads)

    def close(self) -> None:
        """Free the model and its context now rather than at garbage collection."""
        if self.draft is not None:
            self.draft.close()
        if self.vision is not None:
            self.vision.close()
        self.llm.close()


def preset_names() -> list[str]:
    """Names of the built-in chat formats (for settings screens)."""
    return [p.name for p in PRESETS.values()]
