"""Importance matrices and quality reports: the app's side of the quality process.

Each pass runs in a fresh child process (``worker.py``), started with the ``spawn``
context as the chat engine is, and talks over a pipe. Cancel is the engine's shared
cancel byte (``models.engine.cancel_flag``): llama.cpp checks it between graph nodes,
so a cancel stops even a long decode. If the process dies (llama.cpp aborted or a kernel
faulted), the job ends with a sentence saying so; nothing is written.

* :func:`generate_imatrix` — ``quantdesk imatrix``: the importance matrix of a model on
  a text, written as llama-imatrix's GGUF.
* :func:`measure_base` — the base model's compact pass, cached (``base_data.py``).
* :func:`evaluate` — ``quantdesk eval``: a quant against its source (KL divergence and
  more), or a model's perplexity alone.
"""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.connection
import os
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

import numpy as np

from models.foundation.errors import Cancelled, QuantDeskError
from models.foundation.jobs import CancelToken, Progress, ProgressCallback
from models.quality.base_data import DEFAULT_TAIL_SAMPLES, DEFAULT_TOP_K, BaseData, cache_path
from models.quality.chunks import ChunkPlan
from models.quality.kld import PerplexityStats, QualityStats
from models.quality.text import EvalText

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MeasureOptions:
    """Settings shared by every pass (llama.cpp's tools' flags of the same names).

    Attributes:
        n_ctx: Tokens per chunk (``-c``, 512).
        n_batch: Tokens per decode call (``-b``, 2048: four chunks at a time).
        chunks: At most this many chunks (``--chunks``), ``None`` for the whole text.
        threads: CPU threads (``-t``); ``None``: every core.
        flash_attn: ``"auto"``, ``"on"`` or ``"off"`` (``-fa``).
        gpu_layers: Layers to offload (``-ngl``); ``None``: llama.cpp's default.
        top_k: Base tokens kept per position in the compact base pass.
        tail_samples: Base tokens drawn per position from the rest of the mass.
    """

    n_ctx: int = 512
    n_batch: int = 2048
    chunks: Optional[int] = None
    threads: Optional[int] = None
    flash_attn: str = "auto"
    gpu_layers: Optional[int] = None
    top_k: int = DEFAULT_TOP_K
    tail_samples: int = DEFAULT_TAIL_SAMPLES

    def request(self) -> dict:
        """The fields every worker request carries."""
        return {"n_ctx": self.n_ctx, "n_batch": self.n_batch, "chunks": self.chunks,
                "threads": self.threads or os.cpu_count() or 1, "flash_attn": self.flash_attn,
                "gpu_layers": self.gpu_layers, "top_k": self.top_k, "tail_samples": self.tail_samples}


def _exit_description(exitcode: Optional[int]) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            return f"was killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"was killed by signal {-exitcode}"
    return f"exited with status {exitcode}"


def run_worker(request: dict, report: Optional[ProgressCallback], cancel: Optional[CancelToken],
               stage: str) -> dict:
    """Run one pass in a fresh quality process; return its ``result`` event.

    Raises:
        Cancelled: ``cancel`` was set.
        QuantDeskError: the pass failed, or the process died.
    """
    from models.engine.cancel_flag import CancelFlag
    from models.quality.worker import quality_main

    mp = multiprocessing.get_context("spawn")
    flag = CancelFlag(mp)
    parent_end, child_end = mp.Pipe(duplex=True)
    process = mp.Process(target=quality_main, args=(child_end, flag.shared, request),
                         name="quantdesk-quality", daemon=True)
    process.start()
    child_end.close()
    model_name = Path(request["model"]).name
    total: Optional[int] = None
    try:
        if report:
            report(Progress(0, None, stage, f"loading {model_name}"))
        while True:
            if cancel is not None and cancel.cancelled:
                flag.set()
            ready = multiprocessing.connection.wait([parent_end, process.sentinel], timeout=0.1)
            if not ready:
                continue
            try:
                event = parent_end.recv()
            except (EOFError, OSError):
                process.join(timeout=5)
                if cancel is not None and cancel.cancelled:
                    raise Cancelled() from None
                raise QuantDeskError(
                    f"The measuring process {_exit_description(process.exitcode)} while "
                    f"{stage.lower()} {model_name}: llama.cpp could not run it here.",
                    "The log file has llama.cpp's last lines; try fewer --gpu-layers or another model file.",
                ) from None
            kind = event["event"]
            if kind == "plan":
                total = event["n_chunk"]
                if report:
                    report(Progress(0, total, stage, f"{model_name}: {event['n_tokens']} tokens, {total} chunks"))
            elif kind == "progress":
                if report:
                    report(Progress(event["done"], event["total"], stage,
                                    f"{model_name}: PPL {event['ppl']:.4f} after {event['done']} chunks"))
            elif kind == "result":
                return event
            elif kind == "cancelled":
                raise Cancelled()
            elif kind == "error":
                raise QuantDeskError(event["what"], event["fix"])
    finally:
        parent_end.close()
        process.join(timeout=10)
        if process.is_alive():
            process.kill()
            process.join(timeout=5)


def _text_request(model: Path, text: EvalText, options: MeasureOptions, mode: str) -> dict:
    return {**options.request(), "mode": mode, "model": str(model), "text": text.data,
            "text_name": text.name}


def _check_model(path: Path) -> dict:
    """``path``'s metadata; a sentence when it is not a GGUF model (before any process starts)."""
    from models.gguf_header import read_gguf_header

    if not path.is_file():
        raise QuantDeskError(f"{path} does not exist." if not path.exists() else f"{path} is not a file.",
                             "Give the path of a GGUF model file.")
    return read_gguf_header(path).metadata


def check_same_vocabulary(model: Path, base: Path) -> None:
    """Refuse a base whose vocabulary differs from the quant's: their predictions cannot be
    compared token by token.

    Raises:
        QuantDeskError: the vocabularies differ (in size or in any token).
    """
    tokens_q = _check_model(model).get("tokenizer.ggml.tokens")
    tokens_b = _check_model(base).get("tokenizer.ggml.tokens")
    if tokens_q is None or tokens_b is None:
        return  # the quality process compares what llama.cpp loaded
    raw_q, raw_b = getattr(tokens_q, "raw", None), getattr(tokens_b, "raw", None)
    same = raw_q == raw_b if raw_q is not None and raw_b is not None else list(tokens_q) == list(tokens_b)
    if not same:
        sizes = (f"{len(tokens_b)} tokens against {len(tokens_q)}" if len(tokens_q) != len(tokens_b)
                 else "the same size but different tokens")
        raise QuantDeskError(
            f"The base model {base.name} and {model.name} have different vocabularies ({sizes}), "
            "so their predictions cannot be compared.",
            "Give as --base the model this file was quantized from.")


@dataclass(frozen=True)
class ImatrixResult:
    """A generated importance matrix.

    Attributes:
        path: The file written.
        entries: Tensors it has data for.
        chunk_count: Chunks it was computed on.
        perplexity: The model's perplexity on the text, as llama-imatrix prints it.
    """

    path: Path
    entries: int
    chunk_count: int
    perplexity: PerplexityStats


def generate_imatrix(model: Path, text: EvalText, output: Path, options: MeasureOptions = MeasureOptions(),
                     report: Optional[ProgressCallback] = None,
                     cancel: Optional[CancelToken] = None) -> ImatrixResult:
    """Compute ``model``'s importance matrix on ``text`` and write it to ``output``.

    Raises:
        Cancelled: the job was cancelled (nothing is written).
        QuantDeskError: the text is too short, the model cannot be run, ...
    """
    from quantize.imatrix import save_imatrix

    _check_model(Path(model))
    result = run_worker(_text_request(model, text, options, "imatrix"), report, cancel,
                        "Importance matrix")
    if cancel is not None:
        cancel.raise_if_cancelled()
    sums, counts = result["sums"], result["counts"]
    if not sums:
        raise QuantDeskError(f"{Path(model).name} ran no matrix multiplication that an "
                             "importance matrix covers (blk.* weights with 16 rows or more).",
                             "Use a context of 16 tokens or more, and a transformer model.")
    chunk_size = result["n_ctx"]
    chunk_count = max(int(c.max()) for c in counts.values()) // chunk_size
    save_imatrix(Path(output), sums, counts, [text.name], chunk_count, chunk_size)
    return ImatrixResult(Path(output), len(sums), chunk_count, PerplexityStats.from_nll(result["nll"]))


def measure_activations(model: Path, text: EvalText, options: MeasureOptions = MeasureOptions(),
                        report: Optional[ProgressCallback] = None,
                        cancel: Optional[CancelToken] = None, sample_rows: int = 0) -> "ImportanceMatrix":
    """The mean squared input of every weight matrix's columns over ``text`` (the output
    head's included), held in memory: what a size fit weighs each tensor's error with.

    With ``sample_rows``, also up to that many of each dense weight's input rows, spread
    over the text (``ImportanceMatrix.samples``): the fit computes the products from them.

    Raises:
        Cancelled: the job was cancelled.
        QuantDeskError: the text is too short, the model cannot be run, ...
    """
    from quantize.imatrix import ImportanceMatrix

    _check_model(Path(model))
    request = {**_text_request(model, text, options, "imatrix"), "include_output": True}
    if sample_rows:
        # odd, so that the rows kept do not fall on the same positions of every chunk
        every = max(1, (options.chunks or 16) * options.n_ctx // sample_rows) | 1
        request.update(sample_rows=sample_rows, sample_every=every)
    result = run_worker(request, report, cancel, "Activations")
    if cancel is not None:
        cancel.raise_if_cancelled()
    entries = {}
    for name, sums in result["sums"].items():
        counts = np.maximum(result["counts"][name], 1).astype(np.float32)
        per_matrix = counts if counts.size == sums.shape[0] else np.full(sums.shape[0], counts[0])
        entries[name] = (sums / per_matrix[:, None]).reshape(-1).astype(np.float32)
    return ImportanceMatrix(Path(model), entries, [text.name], int(result["n_chunk"]),
                            samples=dict(result.get("samples", {})))


def measure_base(source: Path, text: EvalText, options: MeasureOptions = MeasureOptions(),
                 report: Optional[ProgressCallback] = None, cancel: Optional[CancelToken] = None,
                 cache_folder: Optional[Path] = None) -> tuple[BaseData, Path]:
    """The base model's compact pass over ``text`` and the file holding it, from the cache
    when it was made before."""
    if cache_folder is None:
        from models.foundation.paths import app_paths

        cache_folder = app_paths().cache
    path = cache_path(cache_folder, Path(source), text.data, options.n_ctx, options.chunks,
                      options.n_batch, options.top_k, options.tail_samples)
    if path.exists():
        try:
            return BaseData.load(path), path
        except QuantDeskError as exc:
            log.warning("%s; measuring the base again", exc.user_message)
    result = run_worker(_text_request(Path(source), text, options, "base"), report, cancel, "Base model")
    if cancel is not None:
        cancel.raise_if_cancelled()
    plan = ChunkPlan(result["n_ctx"], result["n_chunk"], result["n_batch"], result["n_seq"])
    data = BaseData(plan, result["n_vocab"], result["vocab_digest"], result["tokens"], result["rows"],
                    options.top_k, options.tail_samples, str(source))
    data.save(path)
    return data, path


def evaluate(model: Path, base: Optional[Path], text: EvalText, options: MeasureOptions = MeasureOptions(),
             report: Optional[ProgressCallback] = None, cancel: Optional[CancelToken] = None,
             cache_folder: Optional[Path] = None) -> Union[QualityStats, PerplexityStats]:
    """``model``'s quality report against ``base`` (its source), or its perplexity alone.

    The base's pass is cached, so a second quant of the same source only runs its own pass.
    """
    _check_model(Path(model))
    if base is None:
        result = run_worker(_text_request(Path(model), text, options, "ppl"), report, cancel, "Perplexity")
        return PerplexityStats.from_nll(result["nll"])
    check_same_vocabulary(Path(model), Path(base))
    base_data, path = measure_base(Path(base), text, options, report, cancel, cache_folder)
    request = {**options.request(), "mode": "compare", "model": str(model), "base_data": str(path),
               "n_batch": base_data.plan.n_batch}
    result = run_worker(request, report, cancel, "Quant")
    return QualityStats.from_comparison(result["comparison"])

