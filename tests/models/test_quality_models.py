"""Importance matrices and quality reports with the real SmolLM2 through llama.cpp.

Small settings (chunks of 32 tokens, four of them, two threads) keep each pass to seconds;
the fidelity against llama.cpp's own tools is ``tests/benchmarks/bench_quality_fidelity.py``.
"""

from __future__ import annotations

import json
import multiprocessing
import re
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFReader

from models.foundation.errors import Cancelled, QuantDeskError
from models.foundation.jobs import CancelToken
from models.quality import runner
from models.quality.runner import MeasureOptions, evaluate, generate_imatrix
from models.quality.text import EvalText, builtin_text
from quantize.imatrix import load_imatrix

pytestmark = [pytest.mark.smollm2, pytest.mark.slow]

#: Four chunks of 32 tokens, decoded in one call: each pass is one short decode.
SMALL = MeasureOptions(n_ctx=32, n_batch=128, chunks=4, threads=2)
SCORED = SMALL.chunks * (SMALL.n_ctx - 1 - SMALL.n_ctx // 2)
MATMULS = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")


@pytest.fixture(scope="module")
def text() -> EvalText:
    return builtin_text()


@pytest.fixture(scope="module")
def smollm2_f16(smollm2_gguf, tmp_path_factory) -> Path:
    """SmolLM2's weights as an F16 GGUF: a source to quantize and to measure against."""
    from tests.quantize.model_files import write_dequantized_f16

    return write_dequantized_f16(smollm2_gguf, tmp_path_factory.mktemp("f16") / "smol-F16.gguf")


@pytest.fixture(scope="module")
def smollm2_imatrix(smollm2_gguf, text, tmp_path_factory):
    """SmolLM2's importance matrix on the built-in text (four chunks at a time)."""
    return generate_imatrix(smollm2_gguf, text, tmp_path_factory.mktemp("imatrix") / "smol.imatrix.gguf", SMALL)


def _imatrix_values(path: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    reader = GGUFReader(path)
    tensors = {t.name: np.array(t.data) for t in reader.tensors}
    return {name[:-len(".in_sum2")]: (tensors[name], tensors[name[:-len(".in_sum2")] + ".counts"])
            for name in tensors if name.endswith(".in_sum2")}


def test_imatrix_covers_every_block_matmul_whatever_the_batching(smollm2_gguf, smollm2_imatrix, text, tmp_path):
    one_at_a_time = generate_imatrix(smollm2_gguf, text, tmp_path / "one.imatrix.gguf",
                                     MeasureOptions(**{**SMALL.__dict__, "n_batch": SMALL.n_ctx}))
    assert (smollm2_imatrix.entries, smollm2_imatrix.chunk_count) == (30 * len(MATMULS), SMALL.chunks)
    a, b = _imatrix_values(one_at_a_time.path), _imatrix_values(smollm2_imatrix.path)
    assert set(a) == {f"blk.{i}.{m}.weight" for i in range(30) for m in MATMULS} == set(b)
    for name, (sums, counts) in a.items():
        assert counts.tolist() == [SMALL.chunks * SMALL.n_ctx] == b[name][1].tolist(), name
        assert (sums > 0).all(), name
        # one sequence per decode or four at a time: the same activations
        np.testing.assert_allclose(b[name][0], sums, rtol=1e-4, err_msg=name)
    matrix = load_imatrix(smollm2_imatrix.path)
    assert matrix.datasets == [text.name] and matrix.chunk_count == SMALL.chunks
    # the perplexity llama-imatrix prints equals that of a perplexity-only pass
    alone = evaluate(smollm2_gguf, None, text, SMALL)
    assert alone.count == SCORED
    assert smollm2_imatrix.perplexity.ppl == pytest.approx(alone.ppl, rel=1e-5)
    assert one_at_a_time.perplexity.ppl == pytest.approx(alone.ppl, rel=1e-4)


INDEPENDENT_PPL = r"""
import math, sys
import numpy as np
import llama_cpp
text = open(sys.argv[2], "rb").read()
llm = llama_cpp.Llama(model_path=sys.argv[1], n_ctx=32, n_batch=32, logits_all=True, n_threads=2, verbose=False)
tokens = llm.tokenize(text, add_bos=True, special=False)
adds_bos = llama_cpp.llama_vocab_get_add_bos(llama_cpp.llama_model_get_vocab(llm.model))
nll = []
for c in range(4):
    chunk = tokens[c * 32:(c + 1) * 32]
    if adds_bos:  # SmolLM2 adds none: its chunks start with their own first token
        chunk[0] = llm.token_bos()
    llm.reset()
    llm.eval(chunk)
    for i in range(16, 31):  # the second half predicts the next token
        logits = np.asarray(llm.scores[i], dtype=np.float64)
        lse = logits.max() + math.log(np.exp(logits - logits.max()).sum())
        nll.append(lse - logits[tokens[c * 32 + i + 1]])
print(math.exp(sum(nll) / len(nll)))
"""


def test_perplexity_follows_llama_cpps_definition(smollm2_gguf, text, tmp_path):
    """An independent computation with llama-cpp-python's high-level API: chunks of the
    text tokenized once, each one's first token BOS when the model adds one, the second
    half scored."""
    import subprocess
    import sys

    (tmp_path / "text.txt").write_bytes(text.data)
    result = subprocess.run([sys.executable, "-c", INDEPENDENT_PPL, str(smollm2_gguf), str(tmp_path / "text.txt")],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    # Llama() leaves flash attention off; llama.cpp's tools (and ours) default to auto
    ours = evaluate(smollm2_gguf, None, text, MeasureOptions(**{**SMALL.__dict__, "flash_attn": "off"}))
    assert ours.ppl == pytest.approx(float(result.stdout.split()[-1]), rel=1e-5)


TOKENIZE = r"""
import json, sys
import llama_cpp
llm = llama_cpp.Llama(model_path=sys.argv[1], vocab_only=True, verbose=False)
print(json.dumps(llm.tokenize(open(sys.argv[2], "rb").read(), add_bos=True, special=False)))
"""


def test_imatrix_of_the_first_layer_equals_numpy(smollm2_gguf, smollm2_imatrix, text, tmp_path):
    """The input of blk.0's attention projections is the normed token embedding, which numpy
    can compute from the file: its Σx² per column over the chunks' tokens is the imatrix."""
    import subprocess
    import sys

    from gguf.quants import dequantize

    (tmp_path / "text.txt").write_bytes(text.data)
    result = subprocess.run([sys.executable, "-c", TOKENIZE, str(smollm2_gguf), str(tmp_path / "text.txt")],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    tokens = json.loads(result.stdout.strip().splitlines()[-1])[:SMALL.chunks * SMALL.n_ctx]
    reader = GGUFReader(smollm2_gguf)
    assert not reader.fields["tokenizer.ggml.add_bos_token"].contents()  # no token is replaced
    t = {x.name: x for x in reader.tensors}
    embd = dequantize(t["token_embd.weight"].data, t["token_embd.weight"].tensor_type).reshape(-1, 576)
    x = embd[tokens].astype(np.float64)
    eps = reader.fields["llama.attention.layer_norm_rms_epsilon"].contents()
    x = x / np.sqrt((x * x).mean(axis=1, keepdims=True) + eps) * np.asarray(t["blk.0.attn_norm.weight"].data)
    expected = (x * x).sum(axis=0)
    values = _imatrix_values(smollm2_imatrix.path)
    for name in ("attn_q", "attn_k", "attn_v"):
        np.testing.assert_allclose(values[f"blk.0.{name}.weight"][0], expected, rtol=1e-4, err_msg=name)


def test_quantizing_with_a_generated_imatrix_records_it_as_llama_quantize(smollm2_f16, smollm2_imatrix, text,
                                                                        tmp_path, monkeypatch):
    from app.cli import main

    monkeypatch.chdir(smollm2_imatrix.path.parent)
    assert main(["quantize", str(smollm2_f16), "--type", "Q3_K_S", "--imatrix", smollm2_imatrix.path.name,
                 "-o", str(tmp_path / "q3.gguf")]) == 0
    fields = GGUFReader(tmp_path / "q3.gguf").fields
    assert fields["quantize.imatrix.file"].contents() == "smol.imatrix.gguf"
    assert fields["quantize.imatrix.dataset"].contents() == text.name
    assert fields["quantize.imatrix.entries_count"].contents() == 210
    assert fields["quantize.imatrix.chunks_count"].contents() == SMALL.chunks


def test_a_model_against_itself_has_no_divergence(smollm2_gguf, text, tmp_path):
    stats = evaluate(smollm2_gguf, smollm2_gguf, text, SMALL, cache_folder=tmp_path)
    assert stats.count == SCORED
    assert abs(stats.mean_kld[0]) < 1e-6 and stats.same_top[0] == 1.0
    assert stats.ppl[0] == pytest.approx(stats.base_ppl[0], rel=1e-6)


def test_quant_against_source_and_the_base_pass_is_measured_once(smollm2_gguf, smollm2_f16, text, monkeypatch,
                                                                 capsys):
    from app.cli import main
    from models.foundation.paths import app_paths

    modes = []
    real = runner.run_worker

    def counting(request, *args):
        modes.append(request["mode"])
        return real(request, *args)

    monkeypatch.setattr(runner, "run_worker", counting)
    assert main(["eval", str(smollm2_gguf), "--base", str(smollm2_f16), "--ctx", "32", "--chunks", "4",
                 "--batch", "128", "--threads", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("ppl", "base_ppl", "mean_kld", "same_top_percent"):
        assert isinstance(out[key], float) and isinstance(out[f"{key}_uncertainty"], float)
    assert out["tokens"] == SCORED and out["text"] == text.name
    assert 0.0001 < out["mean_kld"] < 1.0 and 50 < out["same_top_percent"] <= 100
    from models.library import Library

    record = Library().quality(smollm2_gguf)  # stored with the file's Library entry
    assert record.stats["mean_kld"] == out["mean_kld"] and record.base == str(smollm2_f16.resolve())
    assert record.settings["n_ctx"] == 32

    again = evaluate(smollm2_gguf, smollm2_f16, text, SMALL, cache_folder=app_paths().cache)
    assert modes == ["base", "compare", "compare"]
    assert again.to_dict() == {k: v for k, v in out.items() if k not in ("model", "base", "text", "n_ctx")}
    assert len(list((app_paths().cache / "quality-base").iterdir())) == 1


# --- bad input: a sentence, and nothing left behind ---------------------------------------

def test_a_text_too_short_for_two_chunks_is_a_sentence(smollm2_gguf, tmp_path):
    short = EvalText("short.txt", b"Only a few words here, far fewer than sixty-four tokens.")
    output = tmp_path / "out.imatrix.gguf"
    with pytest.raises(QuantDeskError) as err:
        generate_imatrix(smollm2_gguf, short, output, SMALL)
    assert re.search(r"short\.txt is \d+ tokens long, too short for two chunks of 32", str(err.value))
    assert list(tmp_path.iterdir()) == []


def test_a_base_with_another_vocabulary_is_refused_before_measuring(smollm2_gguf, text, tmp_path, monkeypatch):
    from tests.quantize.model_files import TinyLlama, write_tiny_llama

    other = write_tiny_llama(tmp_path / "tiny.gguf", TinyLlama())
    monkeypatch.setattr(runner, "run_worker", lambda *a: pytest.fail("no pass should start"))
    with pytest.raises(QuantDeskError, match=r"different vocabularies \(320 tokens against 49152\)"):
        evaluate(smollm2_gguf, other, text, SMALL, cache_folder=tmp_path / "cache")
    assert not (tmp_path / "cache").exists()


def test_an_imatrix_of_another_model_is_a_sentence(smollm2_imatrix, tmp_path, capsys):
    from app.cli import main
    from tests.quantize.model_files import TinyLlama, write_tiny_llama

    tiny = write_tiny_llama(tmp_path / "tiny-F16.gguf", TinyLlama(n_layer=2))
    assert main(["quantize", str(tiny), "--type", "Q4_K_M", "--imatrix", str(smollm2_imatrix.path),
                 "-o", str(tmp_path / "q.gguf")]) == 1
    assert "was computed for another model" in capsys.readouterr().err
    assert [p.name for p in tmp_path.iterdir()] == ["tiny-F16.gguf"]


def test_cancel_stops_the_pass_and_writes_nothing(smollm2_gguf, text, tmp_path):
    cancel = CancelToken()

    def report(progress):
        if progress.done >= 1:
            cancel.cancel()

    output = tmp_path / "out.imatrix.gguf"
    with pytest.raises(Cancelled):
        generate_imatrix(smollm2_gguf, text, output, MeasureOptions(n_ctx=32, n_batch=32, chunks=40, threads=2),
                         report, cancel)
    assert list(tmp_path.iterdir()) == []
    assert not [p for p in multiprocessing.active_children() if p.name == "quantdesk-quality"]


def test_a_crash_in_llama_cpp_is_a_sentence(smollm2_gguf, text, tmp_path, monkeypatch):
    from models.quality.worker import TEST_CRASH_ENV

    monkeypatch.setenv(TEST_CRASH_ENV, "after-load")
    with pytest.raises(QuantDeskError, match="measuring process was killed by SIGABRT"):
        generate_imatrix(smollm2_gguf, text, tmp_path / "x.imatrix.gguf", SMALL)
    assert list(tmp_path.iterdir()) == []
