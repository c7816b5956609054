"""What the Quantize page needs that is not about widgets: facts, sizes, names and a queue.

- :func:`inspect_input` opens a model to quantize (an HF safetensors folder or an
  F32/F16/BF16 GGUF), reads its facts (architecture, parameters, current type,
  tokenizer) and plans every target type with :mod:`quantize.plan`: exact output size
  and bits per weight before any weight is read, plus a fit badge from
  :mod:`models.memory_fit` for the planned file at the default load settings.
- :func:`output_path` names an output as llama.cpp does (``{name}-{type}.gguf``); the
  ``quantdesk quantize`` command uses the same rule, so the GUI and CLI agree.
- :func:`run_quantize` is the long job: :func:`quantize.job.quantize_model` (atomic
  outputs, one pass for every type) and each output recorded in the Library.
- :class:`QuantizeQueue` holds the jobs the user started, runs them one at a time, and
  says whether an input is busy (the page disables "Start" for it).

Everything here is Qt-free and tested without a display.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from models.foundation.errors import QuantDeskError
from models.foundation.jobs import CancelToken, JobResult, ProgressCallback, eta_seconds

#: The target types the page lists, in its order (largest first), named as llama-quantize names them:
#: each i-quant beside the k-quants of about its size (bits per weight on a Llama-3-8B in brackets).
#: Only those the quantizer can write (``quantize.ftypes.FILE_TYPES``) are offered.
TYPE_ORDER = ("F32", "F16", "BF16", "Q8_0", "Q6_K", "Q5_K_M", "Q5_K_S", "Q5_1", "Q5_0",
              "Q4_K_M", "Q4_K_S", "Q4_1", "IQ4_NL",  # 4.5
              "Q4_0", "IQ4_XS", "MXFP4_MOE",  # 4.25; MXFP4 for MoE experts, Q8_0 elsewhere
              "Q3_K_L", "Q3_K_M", "IQ3_M", "IQ3_S", "Q3_K_S", "IQ3_XS", "IQ3_XXS",  # 4.0 .. 3.1
              "Q2_K", "Q2_K_S", "IQ2_M", "IQ2_S", "IQ2_XS", "TQ2_0", "IQ2_XXS",  # 3.0 .. 2.1
              "IQ1_M", "TQ1_0", "IQ1_S")  # 1.75 .. 1.56
DEFAULT_PATTERN = "{name}-{type}.gguf"
_FLOAT_SUFFIX = re.compile(r"[-_.](f32|f16|bf16)$", re.IGNORECASE)


def offered_types() -> list[str]:
    """The type names the page offers: :data:`TYPE_ORDER` ∩ what the quantizer writes."""
    from quantize.ftypes import FILE_TYPES

    return [name for name in TYPE_ORDER if name in FILE_TYPES]


def model_name(input_path: Path) -> str:
    """The ``{name}`` of an output: a folder's name, or a GGUF's stem without ``-F16``."""
    input_path = Path(input_path)
    if input_path.is_dir():
        return input_path.name
    return _FLOAT_SUFFIX.sub("", input_path.stem)


def default_output_folder(input_path: Path) -> Path:
    """Where outputs go unless the user picks a folder: inside an HF folder, beside a file."""
    input_path = Path(input_path)
    return input_path if input_path.is_dir() else input_path.parent


def output_path(input_path: Path, type_name: str, folder: Optional[Path] = None,
                pattern: str = DEFAULT_PATTERN) -> Path:
    """The output file for ``type_name``: ``folder / pattern`` with ``{name}``/``{type}`` filled.

    Raises:
        QuantDeskError: the pattern lacks ``{type}`` (several types would collide) or
            names a sub-folder.
    """
    if "{type}" not in pattern:
        raise QuantDeskError(f"The file name pattern '{pattern}' has no {{type}} in it, so every type "
                             "would be written to the same file.", "Use a pattern such as {name}-{type}.gguf.")
    try:
        name = pattern.format(name=model_name(input_path), type=type_name)
    except (KeyError, IndexError, ValueError) as exc:
        raise QuantDeskError(f"The file name pattern '{pattern}' is not valid ({exc}).",
                             "Only {name} and {type} can be filled in, e.g. {name}-{type}.gguf.") from exc
    if "/" in name or "\\" in name or name in ("", ".", ".."):
        raise QuantDeskError(f"The file name pattern '{pattern}' gives '{name}', which is not a file name.",
                             "Choose the folder with the folder button; the pattern names the file only.")
    if not name.lower().endswith(".gguf"):
        name += ".gguf"
    return Path(folder or default_output_folder(input_path)) / name


@dataclass(frozen=True)
class TypeRow:
    """One target type as the page lists it, with its exact planned size."""

    name: str
    file_size: int
    bits_per_weight: float
    needs_imatrix: bool
    fit: Optional[str] = None  # "fits", "tight", "won't fit", or None when unknown
    fit_reason: str = ""

    @property
    def text(self) -> str:
        """``"Q4_K_M 4.89 bpw 81.23 MiB"``: the type name first, as assistive tools read it."""
        from quantize.plan import format_size

        return f"{self.name} {self.bits_per_weight:.2f} bpw {format_size(self.file_size)}"


@dataclass(frozen=True)
class QuantizeInput:
    """A model opened for quantizing: its facts and every offered type's plan."""

    path: Path
    description: str
    architecture: str
    parameters: int
    current_type: str
    tokenizer: str
    rows: tuple[TypeRow, ...]
    #: The smallest and largest file a fit to size can write (``None`` when none can be).
    fit_range: Optional[tuple[int, int]] = None

    def row(self, name: str) -> TypeRow:
        return next(r for r in self.rows if r.name == name)

    def memory_verdict(self, size: int) -> tuple[Optional[str], str]:
        """Whether a file of ``size`` bytes fits this computer: the verdict of the largest
        stock type no larger (its tensors are what the memory estimate reads; a fitted
        file of about its size needs about as much), else of the smallest."""
        known = sorted((r for r in self.rows if r.fit is not None), key=lambda r: r.file_size)
        if not known:
            return None, ""
        below = [r for r in known if r.file_size <= size]
        row = below[-1] if below else known[0]
        return row.fit, f"as {row.name} ({row.text.split(' ', 1)[1]}): {row.fit_reason}"


def _folder_of(path: Path) -> Path:
    """A ``.safetensors`` file, ``config.json`` or pickle file dropped alone means its folder."""
    path = Path(path)
    if path.is_file() and (path.suffix.lower() in (".safetensors", ".bin", ".pt", ".pth", ".ckpt")
                           or path.name == "config.json"):
        return path.parent
    return path


def _fit_header(plan: Any):
    """The GGUF header the plan's file will have, for :func:`models.memory_fit.predict_memory`."""
    from models.gguf_header import GGUFHeader, laid_out

    metadata = {e.key: e.value for e in plan.metadata}
    metadata["general.architecture"] = plan.arch
    tensors = laid_out((p.tensor.name, tuple(reversed(p.tensor.shape)), int(p.qtype), p.nbytes)
                       for p in plan.tensors)
    return GGUFHeader(metadata=metadata, tensors=tensors)


def saved_load_settings() -> dict:
    """The default load settings the user saved in Settings (``{}`` before any is saved)."""
    try:
        from app.core.preferences import Preferences
    except ImportError:  # the preferences store arrives with the window shell
        return {}
    try:
        return dict(Preferences().get("default_load_settings", {}) or {})
    except (OSError, ValueError, QuantDeskError):
        return {}


def fit_settings_from(load_settings: Optional[dict]):
    """:class:`~models.memory_fit.FitSettings` from the saved default load settings."""
    from models.engine.fallback import extra_bufts_for
    from models.memory_fit import KV_TYPES, FitSettings

    values = dict(load_settings or {})
    kv = str(values.get("kv_cache_type_k", "f16"))
    return FitSettings(
        n_ctx=int(values.get("context_length") or 4096),
        kv_type=kv if kv in KV_TYPES else "f16",
        n_gpu_layers=max(0, int(values.get("gpu_layers", 0) or 0)),
        n_batch=int(values.get("batch_size") or 512),
        n_ubatch=int(values.get("micro_batch_size") or 512),
        flash_attn=bool(values["flash_attention"]) if "flash_attention" in values else None,
        use_mmap=bool(values.get("use_mmap", True)),
        use_extra_bufts=extra_bufts_for(bool(values.get("use_extra_bufts", True))),
    )


def _fit(plan: Any, fit_settings: Any, judge: Optional[Callable]) -> tuple[Optional[str], str]:
    from models.memory_fit import fit_on_this_machine

    try:
        verdict = (judge or fit_on_this_machine)(_fit_header(plan), fit_settings)
    except QuantDeskError as exc:
        return None, exc.user_message
    return verdict.verdict, verdict.reason


def _current_type(source: Any, metadata: Sequence[Any]) -> str:
    from models.library import quant_name

    for e in metadata:
        if e.key == "general.file_type":
            return quant_name(int(e.value)) or "?"
    intermediate = getattr(source, "intermediate", None)  # an HF folder seen as its F16/BF16 GGUF
    stored = {t.stored_type.name for t in source.tensors()}
    if intermediate is not None:
        return f"safetensors ({'/'.join(sorted(stored))}; converted via {intermediate.name})"
    return "/".join(sorted(stored))


def inspect_input(path: Path, options: Any = None, load_settings: Optional[dict] = None,
                  types: Optional[Sequence[str]] = None, judge: Optional[Callable] = None,
                  cancel: Optional[CancelToken] = None) -> QuantizeInput:
    """Open ``path`` and plan every offered type; reads headers and shapes, no weights.

    Args:
        path: An HF safetensors folder (or a file in one) or an F32/F16/BF16 GGUF.
        options: :class:`~quantize.job.QuantizeOptions` (pure, overrides, imatrix).
        load_settings: The default load settings (a ``LoadSettings`` dict) for fit badges.
        types: Type names to plan (default: :func:`offered_types`).
        judge: ``(header, FitSettings) -> FitVerdict`` (default: this machine's memory).
        cancel: Checked between types, so a newer input replaces this one quickly.

    Raises:
        QuantDeskError: the input is unsupported (the core's sentence).
    """
    from quantize.ftypes import parse_file_type
    from quantize.imatrix import load_imatrix
    from quantize.job import QuantizeOptions, open_source
    from quantize.plan import plan_quantization

    path = _folder_of(path)
    options = options or QuantizeOptions()
    source = open_source(path)
    try:
        metadata, tensors = list(source.metadata()), source.tensors()
        imatrix = load_imatrix(Path(options.imatrix)) if options.imatrix else None
        plan_options = options.plan_options(imatrix)
        fit_settings = fit_settings_from(load_settings)
        rows = []
        for name in types or offered_types():
            if cancel is not None:
                cancel.raise_if_cancelled()
            plan = plan_quantization(source, parse_file_type(name), plan_options, metadata, tensors)
            fit, reason = _fit(plan, fit_settings, judge)
            rows.append(TypeRow(name, plan.file_size, plan.bits_per_weight,
                                bool(plan.needs_imatrix), fit, reason))
        entries = {e.key: e.value for e in metadata}
        from quantize.fit import fit_bounds, fit_problem

        try:
            fit_range = fit_bounds(fit_problem(source, plan_options, metadata, tensors))
        except QuantDeskError:  # a model no recipe can describe: the stock types only
            fit_range = None
        return QuantizeInput(
            path=path,
            description=source.description,
            architecture=source.arch,
            parameters=sum(t.n_elements for t in tensors),
            current_type=_current_type(source, metadata),
            tokenizer=str(entries.get("tokenizer.ggml.model", "none")),
            rows=tuple(rows),
            fit_range=fit_range,
        )
    finally:
        getattr(source, "close", lambda: None)()


@dataclass
class QuantizeRequest:
    """One job the user started: an input, the types, the options and the output names."""

    input: Path
    types: list[str]
    options: Any = None  # quantize.job.QuantizeOptions
    folder: Optional[Path] = None
    pattern: str = DEFAULT_PATTERN
    #: Make (or reuse) the input's importance matrix on this text first and quantize with
    #: it (:func:`app.core.quality_checks.make_imatrix`); ``None``: ``options.imatrix`` as given.
    imatrix_from: Any = None  # app.core.quality_checks.MeasureSettings
    #: Instead of ``types``: a file of at most this many bytes, each tensor's type chosen
    #: by measurement (:func:`quantize.fit.fit_model`).
    fit_size: Optional[int] = None

    def fit_path(self) -> Path:
        """The fitted file's name: the pattern with ``fit-1.2GB`` as its type."""
        from quantize.recipe import format_target

        return output_path(self.input, f"fit-{format_target(self.fit_size)}", self.folder, self.pattern)

    def describe(self) -> str:
        """What the job makes, for progress lines: ``"Q4_K_M, Q6_K"`` or ``"a fit to 1.2GB"``."""
        from quantize.recipe import format_target

        return f"a fit to {format_target(self.fit_size)}" if self.fit_size else ", ".join(self.types)

    def targets(self) -> list:
        """:class:`~quantize.job.QuantizeTarget` for each type, named by :func:`output_path`."""
        from quantize.ftypes import parse_file_type
        from quantize.job import QuantizeTarget

        return [QuantizeTarget(parse_file_type(t), output_path(self.input, t, self.folder, self.pattern))
                for t in self.types]


def run_quantize(request: QuantizeRequest, report: Optional[ProgressCallback] = None,
                 cancel: Optional[CancelToken] = None, library: Any = None) -> JobResult:
    """Quantize ``request`` (one pass for all its types) and record each output in the Library.

    With ``request.imatrix_from`` the job's first stage is the importance matrix (made in
    the quality process, or reused when made before for the same source and text).
    Outputs are written atomically by the quantizer: a cancel or failure leaves nothing.
    """
    import dataclasses

    from models.library import Library
    from quantize.job import QuantizeOptions, quantize_model

    options = request.options or QuantizeOptions()
    if request.imatrix_from is not None:
        from app.core.quality_checks import make_imatrix

        made = make_imatrix(request.input, request.imatrix_from, report, cancel)
        options = dataclasses.replace(options, imatrix=made.path)
    if request.fit_size:
        from quantize.fit import FitTarget
        from quantize.fit_job import fit_model

        fitted = fit_model(request.input, request.fit_path(), FitTarget(file_size=request.fit_size), options=options,
                           report=report, cancel=cancel)
        gguf, recipe = fitted.outputs[0], fitted.outputs[-1]
        result = JobResult(outputs=[gguf], summary=f"{fitted.summary}\nRecipe: {recipe}")
    else:
        result = quantize_model(request.input, request.targets(), options, report, cancel)
    library = library or Library()
    for path in result.outputs:
        library.record_output(path, "quantized")
    return result


@dataclass
class QueuedJob:
    """A request in the queue and where it stands."""

    request: QuantizeRequest
    state: str = "queued"  # queued, running, done, failed, cancelled
    message: str = ""
    outputs: list[Path] = field(default_factory=list)
    started: Optional[float] = None


class QuantizeQueue:
    """The user's quantize jobs, run one at a time in the order they were started."""

    def __init__(self) -> None:
        self.jobs: list[QueuedJob] = []

    def add(self, request: QuantizeRequest) -> QueuedJob:
        """Queue ``request``; refuse a second job for an input that is queued or running."""
        if self.is_busy(request.input):
            raise QuantDeskError(f"{Path(request.input).name} is already being quantized.",
                                 "Wait for that job to finish, or cancel it.")
        job = QueuedJob(request)
        self.jobs.append(job)
        return job

    def is_busy(self, input_path: Path) -> bool:
        key = Path(input_path).resolve()
        return any(Path(j.request.input).resolve() == key and j.state in ("queued", "running")
                   for j in self.jobs)

    @property
    def running(self) -> Optional[QueuedJob]:
        return next((j for j in self.jobs if j.state == "running"), None)

    def next_to_run(self) -> Optional[QueuedJob]:
        """The oldest queued job, marked running, or ``None`` (also while one runs)."""
        if self.running is not None:
            return None
        job = next((j for j in self.jobs if j.state == "queued"), None)
        if job is not None:
            job.state, job.started = "running", time.monotonic()
        return job

    def finish(self, job: QueuedJob, state: str, message: str = "",
               outputs: Sequence[Path] = ()) -> None:
        """Record how ``job`` ended (``done``, ``failed`` or ``cancelled``)."""
        job.state, job.message, job.outputs = state, message, list(outputs)

    def cancel_queued(self, job: QueuedJob) -> None:
        """Drop a job that has not started."""
        if job.state == "queued":
            job.state = "cancelled"


def eta_text(started: float, fraction: Optional[float], now: Optional[float] = None) -> str:
    """``"ETA 1:05"`` from the time a job (or its stage) started and its fraction done;
    ``"ETA --:--"`` while too little is done to tell (:func:`models.foundation.jobs.eta_seconds`)."""
    left = eta_seconds(started, fraction, now)
    if left is None:
        return "ETA --:--"
    return f"ETA {int(left) // 60}:{int(left) % 60:02d}"
