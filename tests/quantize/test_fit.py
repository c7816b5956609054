"""Fitting a model to a size: budgets held, the knapsack exact, recipes that re-apply byte for byte."""

from __future__ import annotations

import ctypes
import itertools
from pathlib import Path

import numpy as np
import pytest
from quantize.ggml_types import GGMLQuantizationType as T

from app.cli import main
from models.foundation.errors import Cancelled, QuantDeskError
from models.foundation.jobs import CancelToken
from quantize.fit import FitTarget, choose_types, fit_bounds, fit_problem
from quantize.fit_job import fit_model
from quantize.gguf_layout import read_gguf_layout
from quantize.gguf_source import GGUFSource
from quantize.recipe import RECIPE_KEY, load_recipe, parse_size
from tests.quantize.model_files import TinyLlama, write_tiny_llama


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("fit")
    return write_tiny_llama(folder / "tiny-F16.gguf", TinyLlama(n_layer=3, n_embd=256, n_ff=512, seed=3))


@pytest.fixture
def uncalibrated(monkeypatch):
    """For fits whose classes' gains are not what a test checks: every class keeps a gain of 1
    and the probe files are not measured (seconds a fit; see
    ``test_every_class_of_tensor_gets_a_measured_gain``)."""
    import quantize.fit_gains

    monkeypatch.setattr(quantize.fit_gains, "measure_gains", lambda *args, **kwargs: {})


def test_sizes_as_people_write_them():
    assert parse_size("123456") == 123456
    assert parse_size("3.5GB") == 3_500_000_000
    assert parse_size("900MiB") == 900 * 2**20
    assert parse_size(" 1.5 kib ") == 1536
    for bad in ("3.5G", "abc", "-1MB", "0", "12 parsecs"):
        with pytest.raises(QuantDeskError):
            parse_size(bad)
    with pytest.raises(QuantDeskError, match="3.5GB or 3.5GiB"):
        parse_size("3.5G")


def test_a_target_below_the_smallest_file_is_a_sentence_with_that_size(tiny, tmp_path, capsys):
    with GGUFSource(tiny) as source:
        smallest, largest = fit_bounds(fit_problem(source))
    assert smallest < largest
    out = tmp_path / "small.gguf"
    assert main(["quantize", str(tiny), "--target-size", str(smallest - 1), "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert f"{smallest:,} bytes" in err and "smallest" in err
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_the_choice_is_the_least_error_that_fits(tiny):
    """The knapsack against every combination of a few tensors' types."""
    with GGUFSource(tiny) as source:
        problem = fit_problem(source)
    problem = type(problem)(problem.header_bytes, problem.fixed_tensors, problem.choices[:3],
                            problem.alignment, problem.n_parameters)
    # errors made up so that neither the smallest nor the cheapest per byte is always right
    errors = {t.name: {q: (i + 1) * 1000 / (k + 1) ** (1.5 + 0.3 * i) for k, q in enumerate(types)}
              for i, (t, types) in enumerate(problem.choices)}
    low, high = fit_bounds(problem)
    for fraction in (0.1, 0.35, 0.6, 0.9):
        target = FitTarget(file_size=int(low + fraction * (high - low)))
        chosen = choose_types(problem, errors, target)
        assert problem.file_size(chosen) <= target.file_size
        best = min((sum(errors[t.name][q] for (t, _), q in zip(problem.choices, combo)), combo)
                   for combo in itertools.product(*(types for _, types in problem.choices))
                   if problem.file_size({t.name: q for (t, _), q in zip(problem.choices, combo)})
                   <= target.file_size)
        assert sum(errors[n][q] for n, q in chosen.items()) == pytest.approx(best[0])
    # bits per weight count tensor data only, unpadded, over every parameter
    by_bits = FitTarget(bits_per_weight=8 * (low + (high - low) // 2) / problem.n_parameters)
    chosen = choose_types(problem, errors, by_bits)
    data = problem.fixed_bytes(by_bits) + sum(problem.item_bytes(t, chosen[t.name], False) for t, _ in problem.choices)
    assert 8 * data / problem.n_parameters <= by_bits.bits_per_weight


def test_fitted_file_stays_within_the_size_and_its_recipe_rewrites_it_byte_for_byte(tiny, tmp_path, capsys,
                                                                                     uncalibrated):
    with GGUFSource(tiny) as source:
        low, high = fit_bounds(fit_problem(source))
    target = (low + high) // 2
    fitted = tmp_path / "fitted.gguf"
    assert main(["quantize", str(tiny), "--target-size", str(target), "-o", str(fitted), "--threads", "2"]) == 0
    assert "Fitted (recorded as" in capsys.readouterr().out
    assert fitted.stat().st_size <= target
    layout = read_gguf_layout(fitted)
    meta = {e.key: e.value for e in layout.metadata}
    assert list(meta[RECIPE_KEY]) == [int(t.qtype) for t in layout.tensors]
    assert len({t.qtype for t in layout.tensors if t.qtype != T.F32}) > 1  # a real mix (F16 among the choices)
    recipe_json = tmp_path / "fitted.recipe.json"
    assert recipe_json.exists()
    for i, recipe in enumerate((recipe_json, fitted)):  # from the JSON, and from the GGUF itself
        again = tmp_path / f"again-{i}.gguf"
        assert main(["quantize", str(tiny), "--recipe", str(recipe), "-o", str(again), "--threads", "2"]) == 0
        assert again.read_bytes() == fitted.read_bytes()


def test_a_recipe_for_another_model_is_refused(tiny, tmp_path):
    other = write_tiny_llama(tmp_path / "other.gguf", TinyLlama(n_layer=2, n_embd=256, n_ff=512))
    recipe = tmp_path / "r.recipe.json"
    recipe.write_text('{"format": "quantdesk-recipe", "version": 1, "tensors": {"blk.0.attn_q.weight": "Q4_K"}}')
    with pytest.raises(QuantDeskError, match="gives no type"):
        fit_model(other, tmp_path / "o.gguf", recipe=load_recipe(recipe))
    assert not (tmp_path / "o.gguf").exists()


def test_cancel_leaves_nothing(tiny, tmp_path):
    token = CancelToken()
    seen = []

    def report(progress):
        seen.append(progress.stage)
        if progress.stage == "Activations":  # the model running in its child process
            token.cancel()

    with GGUFSource(tiny) as source:
        low, high = fit_bounds(fit_problem(source))
    with pytest.raises(Cancelled):
        fit_model(tiny, tmp_path / "c.gguf", FitTarget(file_size=(low + high) // 2), report=report, cancel=token)
    assert "Activations" in seen
    assert list(tmp_path.iterdir()) == []



def test_imatrix_make_measures_the_model_first_and_keeps_its_matrix(tiny, tmp_path, capsys, monkeypatch,
                                                                   uncalibrated):
    """``--imatrix make``: the model's own importance matrix is made over every layer's
    matrices, the fit uses it (its recipe names it), and the next job reuses it."""
    import quantize.fit_job
    from app.core.quality_checks import MeasureSettings, make_imatrix
    from quantize.imatrix import load_imatrix

    monkeypatch.setattr(quantize.fit_job, "ACTIVATION_CHUNKS", 2)  # 2 × 512 tokens of text: seconds, not minutes
    with GGUFSource(tiny) as source:
        low, high = fit_bounds(fit_problem(source))
        matmuls = {t.name for t in source.tensors() if t.name.startswith("blk.") and len(t.shape) == 2}
    out = tmp_path / "made.gguf"
    assert main(["quantize", str(tiny), "--target-size", str(low + (high - low) // 3), "--imatrix", "make",
                 "-o", str(out), "--threads", "2"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("Importance matrix: "))
    matrix = Path(line.removeprefix("Importance matrix: "))
    assert "reused" not in line and matrix.is_file()
    assert matmuls and matmuls <= set(load_imatrix(matrix).entries)  # every layer's matrices measured
    assert load_recipe(tmp_path / "made.recipe.json").imatrix == str(matrix)
    assert out.stat().st_size <= low + (high - low) // 3
    again = make_imatrix(tiny, MeasureSettings(None, 512, 2))  # what the next --imatrix make asks for
    assert again.reused and again.path == matrix


# -- what a tensor's type costs: the product as llama.cpp computes it --------------------


class _CpuTraits(ctypes.Structure):
    """``struct ggml_type_traits_cpu`` (ggml-cpu.h)."""
    _fields_ = [("from_float", ctypes.c_void_p), ("vec_dot", ctypes.c_void_p), ("vec_dot_type", ctypes.c_int),
                ("nrows", ctypes.c_int64)]


def _ggml_products(data: np.ndarray, qtype: T, inputs: np.ndarray) -> np.ndarray:
    """Rows stored as ``qtype`` (``data``, bytes per row) times ``inputs``, by ggml-cpu's own
    input rounding (``from_float`` of the ``vec_dot_type``) and dot product."""
    from models.llama_lib import open_lib

    cpu = open_lib("libggml-cpu")
    cpu.ggml_cpu_init.restype = None
    cpu.ggml_cpu_init()
    cpu.ggml_get_type_traits_cpu.restype = ctypes.POINTER(_CpuTraits)
    cpu.ggml_get_type_traits_cpu.argtypes = [ctypes.c_int]
    traits = cpu.ggml_get_type_traits_cpu(int(qtype)).contents
    from_float = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(
        cpu.ggml_get_type_traits_cpu(traits.vec_dot_type).contents.from_float)
    vec_dot = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.POINTER(ctypes.c_float), ctypes.c_size_t, ctypes.c_void_p,
                               ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)(traits.vec_dot)
    n = inputs.shape[1]
    out = np.zeros((data.shape[0], inputs.shape[0]))
    for j, x in enumerate(np.ascontiguousarray(inputs, dtype=np.float32)):
        rounded = np.zeros(4 * n + 64, dtype=np.uint8)
        from_float(x.ctypes.data, rounded.ctypes.data, n)
        for i, row in enumerate(np.ascontiguousarray(data)):
            s = ctypes.c_float()
            vec_dot(n, ctypes.byref(s), 0, row.ctypes.data, 0, rounded.ctypes.data, 0, 1)
            out[i, j] = s.value
    return out


def test_each_candidates_product_is_the_one_llama_cpp_computes():
    """The fit's error for a type is the change of ``W·x`` as ggml-cpu computes it: its inputs
    rounded to Q8_0, Q8_1 (with the block sums Q4_1/Q5_1 use), Q8_K, F16 or BF16 — checked
    against ggml-cpu's own rounding and dot products."""
    from quantize.blocks import compile_kernels
    from quantize.encode import encode_rows
    from quantize.fit import INPUT_ROUNDING, _block_minimums, _dequantize, _to_float_type, kernel_product, \
        round_inputs

    rng = np.random.default_rng(5)
    n = 512
    weights = (rng.standard_normal((3, n)) * 0.05).astype(np.float32)
    inputs = (rng.standard_normal((2, n)) * np.exp(rng.standard_normal(n))).astype(np.float32)  # outlier columns
    exact = weights.astype(np.float64) @ inputs.T.astype(np.float64)
    for qtype in (T.Q4_0, T.Q4_1, T.Q5_1, T.Q8_0, T.IQ4_NL, T.Q3_K, T.Q6_K, T.IQ4_XS, T.F16, T.BF16):
        if qtype in (T.F16, T.BF16):
            restored, minimums = _to_float_type(weights, qtype), None
            bits = restored.astype(np.float16).view(np.uint16) if qtype == T.F16 else restored.view(np.uint32) >> 16
            data = bits.astype(np.uint16).view(np.uint8).reshape(len(weights), -1)
        else:
            compile_kernels([qtype], False)
            data = encode_rows(weights, qtype, None)
            restored, minimums = _dequantize(data, qtype), _block_minimums(data, qtype)
        kind = INPUT_ROUNDING[qtype]
        ours = kernel_product(restored, minimums, qtype, {kind: round_inputs(inputs, kind)})
        theirs = _ggml_products(data, qtype, inputs)
        scale = np.abs(theirs).max()
        assert np.abs(ours - theirs).max() < 1e-6 * scale, qtype.name  # the same up to float32 sums
        # ...and not the exact product: the rounding of the inputs is in it
        assert np.abs(exact - theirs).max() > 1e-4 * scale, qtype.name


def test_weights_a_block_type_holds_exactly_still_cost_the_rounding_of_their_inputs():
    """A tensor whose weights lie on Q4_1's grid (as SmolLM2's, shipped as Q4_1): by the
    weight error alone Q4_1 is nearly free, but llama.cpp multiplies Q4_1 against inputs
    rounded to 8 bits, so with recorded inputs F16 — a candidate — is the one without loss,
    and the knapsack buys it for the tensor when the bytes allow."""
    from quantize.blocks import compile_kernels
    from quantize.encode import encode_rows
    from quantize.fit import FitProblem, _dequantize, candidate_types, tensor_errors
    from quantize.imatrix import ImportanceMatrix
    from quantize.source import SourceTensor

    rng = np.random.default_rng(7)
    compile_kernels([T.Q4_1], False)
    grid = _dequantize(encode_rows((rng.standard_normal((64, 256)) * 0.05).astype(np.float32), T.Q4_1, None), T.Q4_1)
    values = grid.astype(np.float16)
    tensor = SourceTensor("blk.0.attn_v.weight", values.shape, T.F16, lambda: values.astype(np.float32),
                          lambda: values)
    types = candidate_types(tensor, covered_by_imatrix=False)
    assert T.F16 in types and T.BF16 not in types  # BF16 only where the source holds BF16
    inputs = (rng.standard_normal((32, 256)) * np.exp(rng.standard_normal(256))).astype(np.float32)
    mean_squares = np.mean(np.square(inputs, dtype=np.float64), axis=0).astype(np.float32)
    plain = ImportanceMatrix(Path("calibration"), {tensor.name: mean_squares})
    recorded = ImportanceMatrix(Path("calibration"), {tensor.name: mean_squares}, samples={tensor.name: inputs})

    by_weights = tensor_errors(tensor, types, None, plain)
    assert by_weights[T.F16] == 0 and by_weights[T.Q4_1] < 1e-3 * by_weights[T.Q4_0]  # on its grid
    by_product = tensor_errors(tensor, types, None, recorded)
    assert by_product[T.Q4_1] > 100 * by_weights[T.Q4_1]  # the 8-bit inputs
    assert by_product[T.F16] < 1e-6 * by_product[T.Q4_1]
    assert by_product[T.Q8_0] > by_product[T.Q4_1] / 10  # Q8_0 moves the weights off the grid, keeps 8-bit inputs

    problem = FitProblem(0, (), ((tensor, types),), 32, tensor.n_elements)
    roomy = FitTarget(file_size=problem.file_size({tensor.name: T.F16}))
    assert choose_types(problem, {tensor.name: by_product}, roomy)[tensor.name] == T.F16


def test_the_activations_pass_keeps_input_rows_for_every_matrix(tiny):
    """``measure_activations(sample_rows=…)``: rows of each dense matrix's inputs, spread over
    the text, whose squares agree with the mean squares measured beside them."""
    from models.quality.runner import MeasureOptions, measure_activations
    from models.quality.text import builtin_text

    measured = measure_activations(tiny, builtin_text(), MeasureOptions(chunks=1, n_batch=512, flash_attn="off"),
                                   sample_rows=16)
    for name, vector in measured.entries.items():
        rows = measured.samples[name]
        assert rows.shape == (16, vector.size) and np.isfinite(rows).all()
        assert 0.2 < np.square(rows).mean() / vector.mean() < 5


def test_every_class_of_tensor_gets_a_measured_gain(tiny, monkeypatch, tmp_path):
    """Each class's errors are converted to the KL divergence a probe file (that class in
    Q4_0, the rest F16) measures on the calibration text, and the probe files are removed."""
    import tempfile

    import quantize.fit_gains
    from models.quality.runner import MeasureOptions, measure_activations
    from models.quality.text import builtin_text
    from quantize.fit import scale_errors, tensor_class
    from quantize.fit_gains import measure_gains
    from quantize.job import QuantizeOptions

    monkeypatch.setattr(quantize.fit_gains, "GAIN_CHUNKS", 1)
    activations = measure_activations(tiny, builtin_text(), MeasureOptions(chunks=1, n_batch=512, flash_attn="off"),
                                      sample_rows=16)
    with GGUFSource(tiny) as source:
        problem = fit_problem(source)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the probe files go
    gains = measure_gains(tiny, problem, QuantizeOptions(threads=2), activations)
    assert list(tmp_path.iterdir()) == []
    assert set(gains) == {tensor_class(t.name) for t, _ in problem.choices}
    assert {"attn_v", "ffn_down", "token_embd"} <= set(gains)
    assert all(0 < g < float("inf") for g in gains.values())
    errors = {"blk.1.attn_v.weight": {T.Q4_0: 2.0}, "token_embd.weight": {T.Q4_0: 3.0}}
    assert scale_errors(errors, gains) == {"blk.1.attn_v.weight": {T.Q4_0: 2.0 * gains["attn_v"]},
                                           "token_embd.weight": {T.Q4_0: 3.0 * gains["token_embd"]}}
