"""Importance matrices and quality reports with the real SmolLM2 through llama.cpp.

Small settings (chunks of 64 tokens, a few chunks, two threads) keep each pass to seconds;
the fidelity against llama.cpp's own tools is ``tests/benchmarks/bench_quality_fidelity.py``.
"""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFReader

from app.core.errors import Cancelled, QuantDeskError
from app.core.jobs import CancelToken
from models.quality import runner
from models.quality.runner import MeasureOptions, evaluate, generate_imatrix
from models.quality.text import EvalText, builtin_text
from quantize.imatrix import load_imatrix

pytestmark = [pytest.mark.smollm2, pytest.mark.slow]

SMALL = MeasureOptions(n_ctx=64, n_batch=256, chunks=6, threads=2)
MATMULS = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")


@pytest.fixture(scope="module")
def text() -> EvalText:
    return builtin_text()


@pytest.fixture(scope="module")
def smollm2_f16(smollm2_gguf, tmp_path_factory) -> Path:
    """SmolLM2's weights as an F16 GGUF: a source to quantize and to measure against."""
    from tests.quantize.model_files import write_dequantized_f16

    return write_dequantized_f16(smollm2_gguf, tmp_path_factory.mktemp("f16") / "smol-F16.gguf")


def _imatrix_values(path: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    reader = GGUFReader(path)
    tensors = {t.name: np.array(t.data) for t in reader.tensors}
    return {name[:-len(".in_sum2")]: (tensors[name], tensors[name[:-len(".in_sum2")] + ".counts"])
            for name in tensors if name.endswith(".in_sum2")}


def test_imatrix_covers_every_block_matmul_whatever_the_batching(smollm2_gguf, text, tmp_path):
    one = generate_imatrix(smollm2_gguf, text, tmp_path / "one.imatrix.gguf",
                           MeasureOptions(n_ctx=64, n_batch=64, chunks=5, threads=2))
    four = generate_imatrix(smollm2_gguf, text, tmp_path / "four.imatrix.gguf",
                            MeasureOptions(n_ctx=64, n_batch=256, chunks=5, threads=2))
    assert (one.entries, one.chunk_count) == (30 * len(MATMULS), 5)
    a, b = _imatrix_values(one.path), _imatrix_values(four.path)
    assert set(a) == {f"blk.{i}.{m}.weight" for i in range(30) for m in MATMULS}
    assert set(b) == set(a)
    for name, (sums, counts) in a.items():
        assert counts.tolist() == [[5 * 64]] == b[name][1].tolist(), name
        assert (sums > 0).all(), name
        # one sequence per decode or four at a time: the same activations
        np.testing.assert_allclose(b[name][0], sums, rtol=1e-4, err_msg=name)
    matrix = load_imatrix(one.path)
    assert matrix.datasets == [text.name] and matrix.chunk_count == 5
    # the perplexity llama-imatrix prints equals that of a perplexity-only pass
    alone = evaluate(smollm2_gguf, None, text, MeasureOptions(n_ctx=64, n_batch=256, chunks=5, threads=2))
    assert one.perplexity.ppl == pytest.approx(alone.ppl, rel=1e-5)


def test_quantizing_with_a_generated_imatrix_records_it_as_llama_quantize(smollm2_f16, text, tmp_path, monkeypatch):
    from app.cli import main

    imatrix = tmp_path / "smol.imatrix.gguf"
    generate_imatrix(smollm2_f16, text, imatrix, SMALL)
    monkeypatch.chdir(tmp_path)
    assert main(["quantize", str(smollm2_f16), "--type", "Q3_K_S", "--imatrix", "smol.imatrix.gguf",
                 "-o", "q3.gguf"]) == 0
    fields = GGUFReader(tmp_path / "q3.gguf").fields
    assert fields["quantize.imatrix.file"].contents() == "smol.imatrix.gguf"
    assert fields["quantize.imatrix.dataset"].contents() == text.name
    assert fields["quantize.imatrix.entries_count"].contents() == 210
    assert fields["quantize.imatrix.chunks_count"].contents() == SMALL.chunks


def test_a_model_against_itself_has_no_divergence(smollm2_gguf, text, tmp_path):
    stats = evaluate(smollm2_gguf, smollm2_gguf, text, SMALL, cache_folder=tmp_path)
    assert stats.count == SMALL.chunks * (SMALL.n_ctx - 1 - SMALL.n_ctx // 2)
    assert abs(stats.mean_kld[0]) < 1e-6 and stats.same_top[0] == 1.0
    assert stats.ppl[0] == pytest.approx(stats.base_ppl[0], rel=1e-6)
    alone = evaluate(smollm2_gguf, None, text, SMALL)
    assert alone.ppl == pytest.approx(stats.ppl[0], rel=1e-6)


def test_quant_against_source_and_the_base_pass_is_measured_once(smollm2_gguf, smollm2_f16, text, tmp_path,
                                                                 monkeypatch):
    modes = []
    real = runner.run_worker

    def counting(request, *args):
        modes.append(request["mode"])
        return real(request, *args)

    monkeypatch.setattr(runner, "run_worker", counting)
    first = evaluate(smollm2_gguf, smollm2_f16, text, SMALL, cache_folder=tmp_path)
    again = evaluate(smollm2_gguf, smollm2_f16, text, SMALL, cache_folder=tmp_path)
    assert modes == ["base", "compare", "compare"]
    assert first.to_dict() == again.to_dict()
    assert 0.001 < first.mean_kld[0] < 1.0 and 0.5 < first.same_top[0] < 1.0
    assert len(list((tmp_path / "quality-base").iterdir())) == 1


def test_eval_json_for_scripts(smollm2_gguf, smollm2_f16, tmp_path, capsys):
    from app.cli import main

    assert main(["eval", str(smollm2_gguf), "--base", str(smollm2_f16), "--ctx", "64", "--chunks", "3",
                 "--batch", "256", "--threads", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("ppl", "base_ppl", "mean_kld", "same_top_percent"):
        assert isinstance(out[key], float) and isinstance(out[f"{key}_uncertainty"], float)
    assert out["tokens"] == 3 * 31 and out["text"] == "quantdesk-builtin-v1"


# --- bad input: a sentence, and nothing left behind ---------------------------------------

def test_a_text_too_short_for_two_chunks_is_a_sentence(smollm2_gguf, tmp_path):
    short = EvalText("short.txt", b"Only a few words here.")
    output = tmp_path / "out.imatrix.gguf"
    with pytest.raises(QuantDeskError) as err:
        generate_imatrix(smollm2_gguf, short, output, SMALL)
    assert re.search(r"short\.txt is \d+ tokens long, too short for two chunks of 64", str(err.value))
    assert list(tmp_path.iterdir()) == []


def test_a_base_with_another_vocabulary_is_refused_before_measuring(smollm2_gguf, text, tmp_path, monkeypatch):
    from tests.quantize.model_files import TinyLlama, write_tiny_llama

    other = write_tiny_llama(tmp_path / "tiny.gguf", TinyLlama())
    monkeypatch.setattr(runner, "run_worker", lambda *a: pytest.fail("no pass should start"))
    with pytest.raises(QuantDeskError, match=r"different vocabularies \(320 tokens against 49152\)"):
        evaluate(smollm2_gguf, other, text, SMALL, cache_folder=tmp_path / "cache")
    assert not (tmp_path / "cache").exists()


def test_an_imatrix_of_another_model_is_a_sentence(smollm2_gguf, text, tmp_path, capsys):
    from app.cli import main
    from tests.quantize.model_files import TinyLlama, write_tiny_llama

    imatrix = tmp_path / "smol.imatrix.gguf"
    generate_imatrix(smollm2_gguf, text, imatrix, MeasureOptions(n_ctx=64, n_batch=256, chunks=2, threads=2))
    tiny = write_tiny_llama(tmp_path / "tiny-F16.gguf", TinyLlama(n_layer=2))
    assert main(["quantize", str(tiny), "--type", "Q4_K_M", "--imatrix", str(imatrix),
                 "-o", str(tmp_path / "q.gguf")]) == 1
    assert "was computed for another model" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["smol.imatrix.gguf", "tiny-F16.gguf"]


def test_cancel_stops_the_pass_and_writes_nothing(smollm2_gguf, text, tmp_path):
    cancel = CancelToken()

    def report(progress):
        if progress.done >= 1:
            cancel.cancel()

    output = tmp_path / "out.imatrix.gguf"
    with pytest.raises(Cancelled):
        generate_imatrix(smollm2_gguf, text, output, MeasureOptions(n_ctx=64, n_batch=64, chunks=40, threads=2),
                         report, cancel)
    assert list(tmp_path.iterdir()) == []
    assert not [t for t in threading.enumerate() if t.name.startswith("quantdesk-quality")]


def test_a_crash_in_llama_cpp_is_a_sentence(smollm2_gguf, text, tmp_path, monkeypatch):
    from models.quality.worker import TEST_CRASH_ENV

    monkeypatch.setenv(TEST_CRASH_ENV, "after-load")
    with pytest.raises(QuantDeskError, match="measuring process was killed by SIGABRT"):
        generate_imatrix(smollm2_gguf, text, tmp_path / "x.imatrix.gguf", SMALL)
    assert list(tmp_path.iterdir()) == []
