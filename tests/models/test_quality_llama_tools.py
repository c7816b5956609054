"""Our quality numbers against llama.cpp's own tools, on small settings.

Needs ``llama-imatrix`` and ``llama-perplexity`` built from the pinned llama.cpp
(``QUANTDESK_LLAMA_TOOLS``, else ``~/.cache/quantdesk-llama-tools``); skipped without
them (CI does not build them). ``tests/benchmarks/bench_quality_fidelity.py`` is the full
comparison, with times and llama.cpp's default settings.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFReader

from models.quality.runner import MeasureOptions, evaluate, generate_imatrix
from models.quality.text import builtin_text, read_text
from tests.benchmarks.bench_quality_fidelity import find_tools, run_tool

pytestmark = [pytest.mark.smollm2, pytest.mark.slow]

TOOLS_DIR = Path(os.environ.get("QUANTDESK_LLAMA_TOOLS", Path.home() / ".cache" / "quantdesk-llama-tools"))
BIN = find_tools(TOOLS_DIR)
OPTIONS = MeasureOptions(n_ctx=64, n_batch=256, chunks=4, threads=2, flash_attn="off")
FLAGS = ["-c", "64", "-b", "256", "-t", "2", "-fa", "off", "--chunks", "4"]


@pytest.fixture(scope="module")
def tools() -> Path:
    if BIN is None:
        pytest.skip(f"llama.cpp's tools are not built in {TOOLS_DIR}")
    return BIN


@pytest.fixture(scope="module")
def text_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("text") / "builtin.txt"
    path.write_bytes(builtin_text().data)
    return path


def test_imatrix_equals_llama_imatrix(tools, smollm2_gguf, text_file, tmp_path):
    ours = generate_imatrix(smollm2_gguf, read_text(text_file), tmp_path / "ours.gguf", OPTIONS).path
    run_tool(tools, "llama-imatrix", ["-m", str(smollm2_gguf), "-f", str(text_file), *FLAGS,
                                      "-o", str(tmp_path / "theirs.gguf")])
    a = {t.name: np.array(t.data, dtype=np.float64) for t in GGUFReader(ours).tensors}
    b = {t.name: np.array(t.data, dtype=np.float64) for t in GGUFReader(tmp_path / "theirs.gguf").tensors}
    assert set(a) == set(b)
    for name in a:
        if name.endswith(".counts"):
            assert np.array_equal(a[name], b[name]), name
        else:
            np.testing.assert_allclose(a[name], b[name], rtol=1e-4, err_msg=name)
    fields = GGUFReader(tmp_path / "theirs.gguf").fields
    assert GGUFReader(ours).fields["imatrix.chunk_count"].contents() == fields["imatrix.chunk_count"].contents()


def test_perplexity_and_kl_divergence_equal_llama_perplexity(tools, smollm2_gguf, text_file, tmp_path):
    from tests.quantize.model_files import write_dequantized_f16

    f16 = write_dequantized_f16(smollm2_gguf, tmp_path / "f16.gguf")
    text = read_text(text_file)
    ours = evaluate(smollm2_gguf, f16, text, OPTIONS, cache_folder=tmp_path)
    run_tool(tools, "llama-perplexity", ["-m", str(f16), "-f", str(text_file), *FLAGS,
                                         "--kl-divergence-base", str(tmp_path / "base.kld")])
    out, _ = run_tool(tools, "llama-perplexity", ["-m", str(smollm2_gguf), "-f", str(text_file), *FLAGS,
                                                  "--kl-divergence", "--kl-divergence-base",
                                                  str(tmp_path / "base.kld")])
    ppl = float(re.search(r"Mean PPL\(Q\)\s+:\s+([\d.]+)", out).group(1))
    kld = float(re.search(r"Mean\s+KLD:\s+([-\d.]+)", out).group(1))
    same_top = float(re.search(r"Same top p:\s+([\d.]+)", out).group(1))
    assert ours.ppl[0] == pytest.approx(ppl, rel=1e-3)
    # few positions here (124): the sampled tail's noise allows a few percent
    assert ours.mean_kld[0] == pytest.approx(kld, rel=0.05)
    assert abs(100 * ours.same_top[0] - same_top) <= 1.0
