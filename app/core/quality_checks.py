"""What the Quantize page's importance matrix and quality report need that is not about widgets.

- :class:`MeasureSettings` is what a person sets on the page: the text (the built-in one
  or a file), the chunk size and how many chunks; it gives the runner's
  :class:`~models.quality.runner.MeasureOptions`.
- :func:`measuring_source` says which GGUF a measurement runs on: llama.cpp loads GGUF
  files only, so a Hugging Face folder gets a sentence instead.
- :func:`find_imatrix` and :func:`make_imatrix`: an importance matrix for a source, a text
  and settings is made once and kept in the app's cache folder (``imatrix/``), named after
  a digest of the source file (path, size, modification time), the text and the settings,
  as the base pass is (:func:`models.quality.base_data.cache_path`); the next job with the
  same three reuses it, and a changed source file gets a new one.
- :func:`check_quality` is the long job behind "Check quality": each quant against its
  source (:func:`models.quality.runner.evaluate`, the source's pass cached), each report
  stored with the file's Library entry, a file already measured with the same settings
  skipped.
- :func:`quality_rows` turns the stored reports of a source's quants into the rows the
  table and the chart show (type, size, bits per weight, PPL, ΔPPL %, mean KLD, same top %,
  imatrix or not).

Everything here is Qt-free and tested without a display.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from models.foundation.errors import QuantDeskError
from models.foundation.jobs import CancelToken, Progress, ProgressCallback

IMATRIX_FOLDER = "imatrix"


@dataclass(frozen=True)
class MeasureSettings:
    """The text and chunking a person chose for measuring.

    Attributes:
        text_path: A text file, or ``None`` for QuantDesk's built-in text.
        n_ctx: Tokens per chunk (llama.cpp's ``-c``).
        chunks: At most this many chunks; ``None`` for the whole text.
        threads: CPU threads; ``None`` for every core.
    """

    text_path: Optional[str] = None
    n_ctx: int = 512
    chunks: Optional[int] = None
    threads: Optional[int] = None

    def text(self):
        """The :class:`~models.quality.text.EvalText` (read now: a missing file is a sentence)."""
        from models.quality.text import resolve_text

        return resolve_text(self.text_path)

    def options(self):
        """The runner's :class:`~models.quality.runner.MeasureOptions` (llama.cpp's batch of
        2048 tokens, fewer when a chunk is longer)."""
        from models.quality.runner import MeasureOptions

        return MeasureOptions(n_ctx=self.n_ctx, n_batch=max(2048, self.n_ctx), chunks=self.chunks,
                              threads=self.threads)

    def record(self, text_name: str) -> dict:
        """The settings stored with a report (the CLI's ``quantdesk eval`` stores the same keys)."""
        return {"text": text_name, "n_ctx": self.n_ctx, "chunks": self.chunks}


def measuring_source(input_path: Path) -> Path:
    """The GGUF file measurements of ``input_path``'s quants run on.

    Raises:
        QuantDeskError: ``input_path`` is a Hugging Face folder (llama.cpp loads GGUF files only).
    """
    path = Path(input_path)
    if path.is_dir() or path.suffix.lower() != ".gguf":
        raise QuantDeskError(
            f"{path.name} is a Hugging Face folder; importance matrices and quality reports run the "
            "model through llama.cpp, which needs a GGUF file.",
            "Quantize it to F16 first, then open that F16 GGUF here.")
    return path


def imatrix_cache_path(source: Path, text_data: bytes, settings: MeasureSettings,
                       cache_folder: Optional[Path] = None) -> Path:
    """Where the importance matrix of ``source`` over this text with these settings is kept."""
    if cache_folder is None:
        from models.foundation.paths import app_paths

        cache_folder = app_paths().cache
    source = Path(source).resolve()
    st = source.stat()
    key = json.dumps({"source": str(source), "size": st.st_size, "mtime_ns": st.st_mtime_ns,
                      "text": hashlib.sha256(text_data).hexdigest(), "n_ctx": settings.n_ctx,
                      "chunks": settings.chunks}, sort_keys=True)
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return Path(cache_folder) / IMATRIX_FOLDER / f"{source.stem[:60]}-{digest}.imatrix.gguf"


def find_imatrix(source: Path, settings: MeasureSettings, cache_folder: Optional[Path] = None) -> Optional[Path]:
    """The importance matrix made earlier for ``source``, this text and these settings, or ``None``."""
    try:
        path = imatrix_cache_path(source, settings.text().data, settings, cache_folder)
    except OSError:
        return None
    return path if path.is_file() else None


@dataclass(frozen=True)
class ImatrixOutcome:
    """An importance matrix ready for a job.

    Attributes:
        path: The file.
        reused: Whether it was made by an earlier job (nothing was run now).
        perplexity: The source's perplexity on the text, when it was made now.
    """

    path: Path
    reused: bool
    perplexity: Optional[float] = None


def make_imatrix(source: Path, settings: MeasureSettings, report: Optional[ProgressCallback] = None,
                 cancel: Optional[CancelToken] = None, cache_folder: Optional[Path] = None) -> ImatrixOutcome:
    """The importance matrix of ``source`` on the settings' text: reused when made before,
    else computed now (in the quality child process) and kept for the next job.

    Raises:
        Cancelled: the job was cancelled (nothing is written).
        QuantDeskError: the source cannot be measured, the text is too short, ...
    """
    from models.quality.runner import generate_imatrix

    source = measuring_source(source)
    text = settings.text()
    path = imatrix_cache_path(source, text.data, settings, cache_folder)
    if path.is_file():
        if report:
            report(Progress(1, 1, "Importance matrix", f"reusing {path.name}"))
        return ImatrixOutcome(path, True)
    result = generate_imatrix(source, text, path, settings.options(), report, cancel)
    return ImatrixOutcome(result.path, False, result.perplexity.ppl)


@dataclass(frozen=True)
class QualityRow:
    """One quant of a source as the quality table and chart show it.

    Attributes:
        path: The quantized file.
        type_name: Its type (``Q4_K_M``...).
        size: Its size in bytes.
        bits_per_weight: Bits per weight of its tensors.
        imatrix: The importance matrix it was made with (as recorded in the file), or ``""``.
        stats: The stored report's numbers (:meth:`~models.quality.kld.QualityStats.to_dict`).
        settings: The text and chunking it was measured with.
    """

    path: Path
    type_name: str
    size: int
    bits_per_weight: float
    imatrix: str
    stats: dict
    settings: dict

    @property
    def mean_kld(self) -> float:
        return float(self.stats["mean_kld"])

    @property
    def same_top_percent(self) -> float:
        return float(self.stats["same_top_percent"])

    @property
    def ppl(self) -> float:
        return float(self.stats["ppl"])

    @property
    def delta_ppl_percent(self) -> float:
        """How much higher the quant's perplexity is than its source's, in percent."""
        return 100.0 * (float(self.stats["ppl"]) / float(self.stats["base_ppl"]) - 1.0)


def _row(path: Path, record: Any) -> Optional[QualityRow]:
    from models.gguf_header import read_gguf_header
    from models.library import quant_name

    try:
        header = read_gguf_header(path)
    except (OSError, QuantDeskError):
        return None
    elements = sum(t.n_elements for t in header.tensors)
    bits = 8.0 * sum(t.n_bytes for t in header.tensors) / elements if elements else 0.0
    file_type = header.metadata.get("general.file_type")
    name = quant_name(file_type) or path.stem
    if header.metadata.get("quantdesk.recipe.tensor_types") is not None:  # fitted to a size
        name = f"fit {path.stat().st_size / 2**20:.1f} MiB"
    return QualityRow(path, name, path.stat().st_size, bits,
                      str(header.metadata.get("quantize.imatrix.file") or ""), record.stats, record.settings)


def quality_rows(source: Path, library: Any = None) -> list[QualityRow]:
    """The stored reports of every file measured against ``source``, smallest file first."""
    from models.library import Library

    library = library or Library()
    rows = [_row(Path(path), record) for path, record in library.quality_reports(base=Path(source)).items()]
    return sorted((r for r in rows if r is not None), key=lambda r: (r.size, r.type_name))


def check_quality(quants: Sequence[Path], source: Path, settings: MeasureSettings,
                  report: Optional[ProgressCallback] = None, cancel: Optional[CancelToken] = None,
                  library: Any = None, cache_folder: Optional[Path] = None) -> list[QualityRow]:
    """Measure each of ``quants`` against ``source`` and store the reports; return the
    source's rows (:func:`quality_rows`), those measured earlier included.

    A file whose stored report has the same source and settings is not measured again.
    The source's own pass runs once for all of them (it is cached).

    Raises:
        Cancelled: the job was cancelled (the reports finished before stay stored).
        QuantDeskError: a file cannot be measured against this source.
    """
    from models.library import Library
    from models.quality.runner import evaluate

    source = measuring_source(source)
    library = library or Library()
    text = settings.text()
    wanted = settings.record(text.name)
    base_key = str(source.resolve())
    todo = []
    for quant in quants:
        stored = library.quality(Path(quant))
        if stored is None or stored.base != base_key or {k: stored.settings.get(k) for k in wanted} != wanted:
            todo.append(Path(quant))
    for i, quant in enumerate(todo):
        if cancel is not None:
            cancel.raise_if_cancelled()

        def relay(progress: Progress, i=i, name=quant.name) -> None:
            if report:
                report(Progress(progress.done, progress.total, progress.stage,
                                f"file {i + 1} of {len(todo)} · {progress.detail or name}"))

        stats = evaluate(quant, source, text, settings.options(), relay, cancel, cache_folder)
        library.record_quality(quant, source, {**wanted, "tokens": stats.count}, stats.to_dict())
    return quality_rows(source, library)


def imatrix_for_plan(input_path: Path, settings: MeasureSettings,
                     cache_folder: Optional[Path] = None) -> tuple[Optional[Path], str]:
    """For a job that makes its importance matrix: the one made earlier (so that the sizes
    shown are planned with it), or ``None``; and a sentence saying what the job will do."""
    try:
        source = measuring_source(input_path)
        text = settings.text()
        found = find_imatrix(source, settings, cache_folder)
    except QuantDeskError as exc:
        return None, exc.user_message
    chunks = f"{settings.chunks} chunks" if settings.chunks else "the whole text"
    name = "the built-in text" if text.is_builtin else Path(text.name).name
    if found is not None:
        return found, f"Reused: made earlier from {name} ({chunks} of {settings.n_ctx} tokens), {found.name}."
    return None, (f"Made from {name} ({chunks} of {settings.n_ctx} tokens) as the job's first stage, "
                  "and kept for the next job.")
