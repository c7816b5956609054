"""The fit-to-size job: measure the model, choose the types, write the file and its recipe.

:func:`fit_model` is what ``quantdesk quantize --target-size``/``--recipe`` and the
Quantize page's "Fit to size" run: the model's activations on QuantDesk's calibration text
(in the quality process, as an importance matrix is made), the choice of
:mod:`quantize.fit`, then the ordinary quantize job with the recipe as its plan. Progress,
cancel and atomic outputs are the quantize job's.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Optional

from models.foundation.errors import QuantDeskError
from models.foundation.jobs import CancelToken, ProgressCallback
from quantize.fit import FitTarget, check_target, fit_problem, fit_recipe, nearest_file_type
from quantize.ftypes import FILE_TYPES
from quantize.imatrix import ImportanceMatrix
from quantize.plan import PlanOptions, plan_quantization
from quantize.recipe import Recipe
from quantize.source import TensorSource

#: Chunks of calibration text (of 512 tokens) run to measure the activations that weigh errors.
ACTIVATION_CHUNKS = 16
#: Input rows kept per weight matrix from that pass (spread over it): the fit computes each
#: product from them, as llama.cpp's kernels do (:func:`quantize.fit.tensor_errors`).
ACTIVATION_SAMPLE_ROWS = 128


def recipe_target(source: TensorSource, recipe: Recipe, path: Path, options: PlanOptions,
                  metadata=None, tensors=None) -> "QuantizeTarget":
    """The quantize target that writes ``recipe`` to ``path``, recorded as its nearest stock type."""
    from quantize.job import QuantizeTarget

    metadata = list(source.metadata()) if metadata is None else metadata
    tensors = source.tensors() if tensors is None else tensors
    plan = plan_quantization(source, FILE_TYPES["Q8_0"], dataclasses.replace(options, recipe=recipe),
                             metadata, tensors)
    return QuantizeTarget(nearest_file_type(source, plan.file_size, options, metadata, tensors), Path(path), recipe)


def recipe_path(output: Path) -> Path:
    """``model-fit-1.2GB.gguf`` → ``model-fit-1.2GB.recipe.json`` beside it."""
    return Path(output).with_name(Path(output).stem + ".recipe.json")


def fit_model(input, output: Path, target: Optional[FitTarget] = None, recipe: Optional[Recipe] = None,
              options=None, report: Optional[ProgressCallback] = None,
              cancel: Optional[CancelToken] = None, activations: Optional[ImportanceMatrix] = None,
              gains: Optional[dict] = None):
    """Fit a model to ``target`` (or apply ``recipe``) and write it, with its recipe beside it.

    Stages: "Activations" (the model run on QuantDesk's calibration text, when the input is
    a GGUF and no recipe is given), "Measuring", "Calibrating" (each class of tensor's
    gain, :mod:`quantize.fit_gains`, when the input is a GGUF), then the quantize job's
    own stages.

    Args:
        activations: Measured before (:func:`models.quality.runner.measure_activations`);
            measured here when ``None``.
        gains: Measured before (:func:`quantize.fit_gains.measure_gains`); measured here
            when ``None``.

    Returns:
        :class:`~models.foundation.jobs.JobResult`: the GGUF, then its ``.recipe.json``.

    Raises:
        QuantDeskError: the target is below the smallest possible file, a recipe that
            does not fit the model, ...; Cancelled. Nothing partial is left on disk.
    """
    from models.foundation.jobs import JobResult
    from quantize.imatrix import load_imatrix
    from quantize.job import QuantizeOptions, open_source, quantize_model

    options = options or QuantizeOptions()
    if (target is None) == (recipe is None):
        raise QuantDeskError("Give either a target size or a recipe.", "Use --target-size, --target-bpw or --recipe.")
    source = open_source(input) if isinstance(input, (str, Path)) else input
    try:
        imatrix = load_imatrix(Path(options.imatrix)) if options.imatrix else None
        plan_options = options.plan_options(imatrix)
        if recipe is None:
            problem = fit_problem(source, plan_options)
            check_target(problem, target, Path(source.description).name)
            if activations is None:
                activations = _activations(source, report, cancel)
            if gains is None and activations is not None:
                from quantize.fit_gains import measure_gains

                gains = measure_gains(Path(source.path), problem, options, activations, report, cancel)
            recipe = fit_recipe(source, target, plan_options, activations, options.threads, report, cancel,
                                gains).recipe
        quantize_target = recipe_target(source, recipe, output, plan_options)
        result = quantize_model(source, [quantize_target], options, report, cancel)
        saved = recipe.save(recipe_path(output), Path(source.description).name)
    finally:
        if source is not input:
            getattr(source, "close", lambda: None)()
    return JobResult(outputs=list(result.outputs) + [saved], summary=result.summary)


def _activations(source: TensorSource, report, cancel) -> Optional[ImportanceMatrix]:
    """The model's measured activations, when llama.cpp can run the source (a GGUF file)."""
    path = getattr(source, "path", None)
    if path is None or not Path(path).is_file():
        return None
    from models.quality.runner import MeasureOptions, measure_activations
    from models.quality.text import builtin_text

    return measure_activations(Path(path), builtin_text(), MeasureOptions(chunks=ACTIVATION_CHUNKS, flash_attn="off"),
                               report, cancel, sample_rows=ACTIVATION_SAMPLE_ROWS)
