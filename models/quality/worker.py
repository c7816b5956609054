"""The quality child process: one pass of a model over a text, through llama.cpp.

Started by :mod:`models.quality.runner` with the ``spawn`` context; it loads the model
with llama-cpp-python's low-level API, decodes the chunks as llama-perplexity and
llama-imatrix do (``chunks.py``) and answers with one result. Modes (``request["mode"]``):

``imatrix``  collect activations (``collect.py``) with every position's logits requested,
             as llama-imatrix does (asking for fewer would skip rows of the last layer);
             also the perplexity it prints.
``base``     the base model's compact record of every scored position (``kld.base_rows``).
``compare``  the quant's positions against a stored base pass (``kld.compare_rows``),
             decoding the base pass's tokens.
``ppl``      perplexity alone.

Events sent (pickled dicts): ``progress`` ``{"done", "total", "detail"}`` after each
group of chunks; then exactly one of ``result`` (mode-specific arrays), ``error``
``{"what", "fix"}`` or ``cancelled``. A crash inside llama.cpp ends the process, which
the runner turns into a sentence.
"""

from __future__ import annotations

import hashlib
import logging
import os
import signal
from typing import Any

import numpy as np

from models.foundation.errors import Cancelled, QuantDeskError
from models.quality.chunks import ChunkPlan, next_tokens, pieces, plan_chunks
from models.quality.kld import BaseRows, Comparison, base_rows, compare_rows, token_nll

log = logging.getLogger(__name__)

FLASH_ATTN = {"auto": -1, "off": 0, "on": 1}
#: Test hook: ``after-load`` makes the process abort once the model is loaded, so tests
#: drive the real crash path.
TEST_CRASH_ENV = "QUANTDESK_QUALITY_TEST_CRASH"


def _tokenize(llama: Any, vocab: Any, data: bytes) -> np.ndarray:
    """``common_tokenize(ctx, text, add_special=true, parse_special=false)``."""
    capacity = len(data) + 2
    buf = (llama.llama_token * capacity)()
    n = llama.llama_tokenize(vocab, data, len(data), buf, capacity, True, False)
    if n < 0:
        capacity = -n
        buf = (llama.llama_token * capacity)()
        n = llama.llama_tokenize(vocab, data, len(data), buf, capacity, True, False)
    if n < 0:
        raise QuantDeskError("The text could not be tokenized.", "Try a smaller text file.")
    return np.ctypeslib.as_array(buf)[:n].copy()


def vocab_digest(llama: Any, vocab: Any, n_vocab: int) -> str:
    """A digest of every token's text: two models agree on it when their vocabularies do."""
    h = hashlib.sha256()
    for i in range(n_vocab):
        h.update(llama.llama_vocab_get_text(vocab, i) or b"")
        h.update(b"\0")
    return h.hexdigest()


class TokenBatch:
    """A ``llama_batch`` filled from numpy arrays."""

    def __init__(self, llama: Any, capacity: int) -> None:
        self.llama = llama
        self.batch = llama.llama_batch_init(capacity, 0, 1)
        self.capacity = capacity
        self.token = np.ctypeslib.as_array(self.batch.token, shape=(capacity,))
        self.pos = np.ctypeslib.as_array(self.batch.pos, shape=(capacity,))
        self.n_seq_id = np.ctypeslib.as_array(self.batch.n_seq_id, shape=(capacity,))
        self.logits = np.ctypeslib.as_array(self.batch.logits, shape=(capacity,))
        self.seq_ids = [np.ctypeslib.as_array(self.batch.seq_id[i], shape=(1,)) for i in range(capacity)]

    def fill(self, seqs: list[np.ndarray], start: int, output_from: int) -> int:
        """Put each sequence's tokens at positions ``start..``; request logits from
        position ``output_from`` on. Returns the number of outputs."""
        n = 0
        outputs = 0
        for s, tokens in enumerate(seqs):
            size = tokens.size
            positions = np.arange(start, start + size, dtype=np.int32)
            self.token[n:n + size] = tokens
            self.pos[n:n + size] = positions
            self.n_seq_id[n:n + size] = 1
            wanted = positions >= output_from
            self.logits[n:n + size] = wanted
            outputs += int(wanted.sum())
            for i in range(n, n + size):
                self.seq_ids[i][0] = s
            n += size
        self.batch.n_tokens = n
        return outputs

    def free(self) -> None:
        self.llama.llama_batch_free(self.batch)


def _load(llama: Any, request: dict, log_capture: Any) -> Any:
    mark = log_capture.mark()
    params = llama.llama_model_default_params()
    if request.get("gpu_layers") is not None:
        params.n_gpu_layers = int(request["gpu_layers"])
    model = llama.llama_model_load_from_file(request["model"].encode(), params)
    if not model:
        cause = log_capture.first_error(mark)
        raise QuantDeskError(f"llama.cpp could not load {request['model']}"
                             + (f": {cause}." if cause else "."),
                             "Check that it is a complete GGUF model file.")
    return model


def _context(llama: Any, model: Any, plan: ChunkPlan, request: dict, log_capture: Any,
             cb_eval: Any) -> Any:
    params = llama.llama_context_default_params()
    params.n_ctx = plan.context_cells
    params.n_batch = plan.n_batch
    params.n_ubatch = min(int(request.get("ubatch", 512)), plan.n_batch)
    params.n_seq_max = plan.n_seq
    threads = int(request["threads"])
    params.n_threads = params.n_threads_batch = threads
    params.flash_attn_type = FLASH_ATTN[request.get("flash_attn", "auto")]
    params.swa_full = False  # llama.cpp's tools' default (the library's is true)
    params.kv_unified = False
    if cb_eval is not None:
        params.cb_eval = cb_eval
    mark = log_capture.mark()
    ctx = llama.llama_init_from_model(model, params)
    if not ctx:
        cause = log_capture.first_error(mark)
        raise QuantDeskError("llama.cpp could not make a context of "
                             f"{plan.context_cells} tokens" + (f": {cause}." if cause else "."),
                             "Use a smaller --ctx or --batch, or free some memory.")
    return ctx


def run_pass(request: dict, send: Any, cancel_shared: Any) -> dict:
    """The pass ``request`` asks for; returns the ``result`` event's fields."""
    import llama_cpp as llama

    from models.engine.cancel_flag import install_abort_hook
    from models.engine.llama_log import LlamaLogCapture

    log_capture = LlamaLogCapture()
    llama.llama_backend_init()
    mode = request["mode"]
    model = _load(llama, request, log_capture)
    if os.environ.get(TEST_CRASH_ENV) == "after-load":
        log.warning("test hook %s: aborting after the load", TEST_CRASH_ENV)
        os.abort()
    vocab = llama.llama_model_get_vocab(model)
    n_vocab = llama.llama_vocab_n_tokens(vocab)
    digest = vocab_digest(llama, vocab, n_vocab)
    if llama.llama_vocab_get_add_eos(vocab):
        raise QuantDeskError(f"{request['model']} adds an end-of-sequence token to every text, "
                             "which llama.cpp's perplexity and imatrix do not support.",
                             "Measure a model that only adds a beginning-of-sequence token.")
    base = None
    if mode == "compare":
        from models.quality.base_data import BaseData

        base = BaseData.load(request["base_data"])
        if base.n_vocab != n_vocab or base.vocab_digest != digest:
            what = (f"{base.n_vocab} tokens against {n_vocab}" if base.n_vocab != n_vocab
                    else "the same size but different tokens")
            raise QuantDeskError(
                f"The base model {base.source} and {request['model']} have different "
                f"vocabularies ({what}), so their predictions cannot be compared.",
                "Give as --base the model this file was quantized from.")
        tokens = base.tokens
        plan = ChunkPlan(base.plan.n_ctx, base.plan.n_chunk, base.plan.n_batch, base.plan.n_seq)
    else:
        tokens = _tokenize(llama, vocab, request["text"])
        plan = plan_chunks(tokens.size, int(request["n_ctx"]), int(request["n_batch"]),
                           request.get("chunks"), request["text_name"])
    send({"event": "plan", "n_chunk": plan.n_chunk, "n_tokens": int(tokens.size)})

    collector = None
    if mode == "imatrix":
        from models.quality.collect import ActivationCollector

        collector = ActivationCollector(bool(request.get("include_output")), int(request.get("sample_rows", 0)),
                                        int(request.get("sample_every", 1)))
    ctx = _context(llama, model, plan, request, log_capture,
                   collector.callback if collector else None)
    abort_hook = install_abort_hook(ctx, cancel_shared)
    batch = TokenBatch(llama, plan.n_batch)
    add_bos = llama.llama_vocab_get_add_bos(vocab)
    bos = llama.llama_vocab_bos(vocab) if add_bos else None
    output_from = 0 if mode == "imatrix" else plan.first
    memory = llama.llama_get_memory(ctx)

    nll_parts: list[np.ndarray] = []
    base_parts: list[BaseRows] = []
    comparisons: list[Comparison] = []
    top_k, tail_samples = int(request.get("top_k", 0)), int(request.get("tail_samples", 0))
    scored: list[list[np.ndarray]] = []
    try:
        for piece in pieces(tokens, plan, bos):
            if cancel_shared[0]:
                raise Cancelled()
            if piece.start == 0:
                llama.llama_memory_clear(memory, True)
                scored = [[] for _ in piece.tokens]
            n_out = batch.fill(piece.tokens, piece.start, output_from)
            status = llama.llama_decode(ctx, batch.batch)
            if collector is not None:
                collector.check()
            if status == 2 or cancel_shared[0]:
                raise Cancelled()
            if status != 0:
                raise QuantDeskError(f"llama.cpp failed to decode chunk {piece.chunk + 1} (status {status}).",
                                     "Use a smaller --ctx or --batch, or free some memory.")
            if n_out:
                logits = np.ctypeslib.as_array(llama.llama_get_logits(ctx), shape=(n_out, n_vocab))
                per_seq = n_out // len(piece.tokens)
                # rows of this piece that are scored positions (first .. n_ctx-2)
                positions = np.arange(piece.start, piece.start + piece.tokens[0].size)
                positions = positions[positions >= output_from]
                keep = (positions >= plan.first) & (positions < plan.n_ctx - 1)
                for s in range(len(piece.tokens)):
                    rows = logits[s * per_seq:(s + 1) * per_seq][keep]
                    if rows.size:
                        scored[s].append(np.array(rows, dtype=np.float32))
            if not piece.last:
                continue
            for s in range(len(piece.tokens)):
                chunk = piece.chunk + s
                chunk_logits = np.concatenate(scored[s])
                following = next_tokens(tokens, plan, chunk)
                if mode == "base":
                    rows = base_rows(chunk_logits, following, top_k, tail_samples, seed=chunk)
                    base_parts.append(rows)
                    nll_parts.append(-rows.token_logprob)
                elif mode == "compare":
                    comparison = compare_rows(chunk_logits, following, base.chunk_rows(chunk))
                    comparisons.append(comparison)
                    nll_parts.append(comparison.nll)
                else:
                    nll_parts.append(token_nll(chunk_logits, following))
            nll = np.concatenate(nll_parts)
            send({"event": "progress", "done": piece.chunk + len(piece.tokens), "total": plan.n_chunk,
                  "ppl": float(np.exp(nll.mean()))})
    finally:
        batch.free()
        llama.llama_free(ctx)
        llama.llama_model_free(model)
        del abort_hook

    result: dict = {"n_vocab": n_vocab, "vocab_digest": digest, "n_ctx": plan.n_ctx,
                    "n_chunk": plan.n_chunk, "n_batch": plan.n_batch, "n_seq": plan.n_seq,
                    "nll": np.concatenate(nll_parts)}
    if mode == "imatrix":
        result["sums"], result["counts"] = collector.sums, collector.counts
        result["samples"] = collector.samples
    elif mode == "base":
        result["rows"] = BaseRows.concatenate(base_parts)
        result["tokens"] = np.asarray(tokens[:plan.n_chunk * plan.n_ctx], dtype=np.int32)
    elif mode == "compare":
        result["comparison"] = Comparison.concatenate(comparisons)
    return result


def quality_main(conn: Any, cancel_shared: Any, request: dict) -> None:
    """Entry point of the quality process: run one pass, send its result, exit."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl+C is the CLI's cancel, not our death
    from models.foundation.logs import setup_logging

    setup_logging()
    send = conn.send
    try:
        reply = {"event": "result", **run_pass(request, send, cancel_shared)}
    except Cancelled:
        reply = {"event": "cancelled"}
    except QuantDeskError as exc:
        reply = {"event": "error", "what": exc.what, "fix": exc.fix}
    except Exception as exc:  # a bug: say so, with the details in the log
        log.exception("quality pass failed")
        reply = {"event": "error", "what": f"The measurement failed: {exc!r}.",
                 "fix": "The log file has the details; please report it."}
    try:
        send(reply)
    except (BrokenPipeError, OSError):
        pass
    conn.close()
