"""Putting every tensor's error in one unit: the model's output divergence, per class of tensor.

:func:`quantize.fit.tensor_errors` measures what a type does to one matrix product (its
error relative to its typical output). A unit of that does not cost the model's output the same
everywhere: an error in the values of attention or in the output head reaches the logits
differently from one in a gate. So, per class of tensor (``attn_q``, ``ffn_down``, …,
``token_embd``, ``output``), the fit measures it: a file with that class's tensors in a
probe type (Q4_0) and every other tensor F16 is written and run on the calibration text
against the source (mean KL divergence, :func:`models.quality.runner.evaluate`), and

    gain(class) = KLD(class in Q4_0) / Σ_{t in class} error(t, Q4_0)

converts the class's errors into KL divergence (the classes' divergences add up: measured
on SmolLM2, their sum was within 2 % of the whole file's). The knapsack then weighs
``gain(class(t)) · error(t, type)``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Mapping, Optional

from quantize.ggml_types import GGMLQuantizationType as T

from models.foundation.jobs import CancelToken, ProgressCallback, ProgressReporter, check
from quantize.fit import FitProblem, tensor_class, tensor_errors
from quantize.imatrix import ImportanceMatrix
from quantize.recipe import Recipe

#: The type a class is quantized to, to measure its gain (every row of 32 values allows it).
PROBE_TYPE = T.Q4_0
#: Chunks of 512 tokens of the calibration text each probe file is run on: as many as the
#: activations (``quantize.fit_job.ACTIVATION_CHUNKS``). With 4, a class that moves the
#: output little came out noisy: the trained Qwen2's ``ffn_gate`` gain with an importance
#: matrix was 7.0e-5 on 4 chunks and 2.5e-4 on 16 (2.5e-4 without the matrix).
GAIN_CHUNKS = 16

def measure_gains(model: Path, problem: FitProblem, options, activations: Optional[ImportanceMatrix],
                  report: Optional[ProgressCallback] = None,
                  cancel: Optional[CancelToken] = None) -> dict[str, float]:
    """Every class's KL divergence per unit of error (stage "Calibrating").

    Args:
        model: The source GGUF (llama.cpp runs it and the probe files).
        problem: The model's fit problem (its quantized tensors and their candidates).
        options: :class:`quantize.job.QuantizeOptions` (the importance matrix, threads).
        activations: As for :func:`quantize.fit.measure_errors`.
    """
    from models.quality.runner import MeasureOptions, evaluate
    from models.quality.text import builtin_text
    from quantize.fit_job import recipe_target
    from quantize.imatrix import load_imatrix
    from quantize.job import open_source, quantize_model

    imatrix = load_imatrix(Path(options.imatrix)) if options.imatrix else None
    classes: dict[str, list] = {}
    for tensor, types in problem.choices:
        if PROBE_TYPE in types:
            classes.setdefault(tensor_class(tensor.name), []).append(tensor)
    progress = ProgressReporter(report, len(classes), "Calibrating", min_interval=0)
    measure = MeasureOptions(chunks=GAIN_CHUNKS, flash_attn="off", threads=options.threads)
    gains: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="quantdesk-gains-") as folder:
        source = open_source(model)
        try:
            plan_options = options.plan_options(imatrix)
            loaded = {t.name: t for t in source.tensors()}  # the problem's own may be closed
            for name, tensors in classes.items():
                check(cancel)
                progress.advance(1, f"how much {name} moves the output")
                error = sum(tensor_errors(loaded[t.name], (PROBE_TYPE,), imatrix, activations)[PROBE_TYPE]
                            for t in tensors)
                probe = {t.name: T.F16 for t, _ in problem.choices}
                probe.update({t.name: PROBE_TYPE for t in tensors})
                path = Path(folder) / f"{name}.gguf"
                target = recipe_target(source, Recipe(probe), path, plan_options)
                quantize_model(source, [target], options, None, cancel)
                stats = evaluate(path, Path(model), builtin_text(), measure, None, cancel)
                path.unlink()
                gains[name] = max(0.0, stats.mean_kld[0]) / error if error > 0 else 1.0
        finally:
            getattr(source, "close", lambda: None)()
    return gains
