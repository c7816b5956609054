"""Fitting a model to a size: budgets held, the knapsack exact, recipes that re-apply byte for byte."""

from __future__ import annotations

import itertools
from pathlib import Path

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


def test_fitted_file_stays_within_the_size_and_its_recipe_rewrites_it_byte_for_byte(tiny, tmp_path, capsys):
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
    assert len({t.qtype for t in layout.tensors if t.qtype not in (T.F32, T.F16)}) > 1  # a real mix
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



def test_imatrix_make_measures_the_model_first_and_keeps_its_matrix(tiny, tmp_path, capsys, monkeypatch):
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
