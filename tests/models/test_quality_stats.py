"""The arithmetic of quality measurement, without a model: chunking, KL divergence from the
compact base record, llama.cpp's statistics, and the files (base pass, imatrix)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from gguf import GGUFReader

from models.foundation.errors import QuantDeskError
from models.quality.base_data import BaseData, cache_path
from models.quality.chunks import ChunkPlan, next_tokens, pieces, plan_chunks
from models.quality.kld import (Comparison, PerplexityStats, QualityStats, base_rows, compare_rows,
                                percentile, token_nll)
from quantize.imatrix import load_imatrix, save_imatrix


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    m = x.max(axis=1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=1, keepdims=True))


def _logits(rng, n, vocab, scale=4.0):
    return (rng.standard_normal((n, vocab)) * scale).astype(np.float32)


def test_chunks_follow_llama_cpp():
    plan = plan_chunks(n_tokens=1000, n_ctx=128, n_batch=512, chunks=None, text_name="t")
    assert (plan.n_chunk, plan.n_seq, plan.n_batch, plan.first, plan.scored_per_chunk) == (7, 4, 512, 64, 63)
    tokens = np.arange(1000, dtype=np.int32) + 10
    got = list(pieces(tokens, plan, bos=1))
    assert [(p.chunk, len(p.tokens), p.start, p.last) for p in got] == [(0, 4, 0, True), (4, 3, 0, True)]
    # the first token of each chunk is BOS; the text itself is not changed
    assert [int(s[0]) for s in got[1].tokens] == [1, 1, 1]
    assert int(got[1].tokens[2][1]) == 6 * 128 + 1 + 10 and tokens[6 * 128] == 6 * 128 + 10
    assert next_tokens(tokens, plan, 2).tolist() == list(range(2 * 128 + 65 + 10, 3 * 128 + 10))


def test_chunks_longer_than_a_batch_are_decoded_in_pieces():
    plan = plan_chunks(n_tokens=700, n_ctx=256, n_batch=100, chunks=1, text_name="t")
    got = list(pieces(np.arange(700), plan, bos=None))
    assert [(p.start, p.tokens[0].size, p.last) for p in got] == [(0, 100, False), (100, 100, False), (200, 56, True)]
    assert int(got[0].tokens[0][0]) == 0  # no BOS for a model that adds none


@pytest.mark.parametrize("n_tokens,n_ctx,n_batch,chunks,words", [
    (1000, 512, 2048, None, "too short for two chunks"),
    (5000, 16, 2048, None, "too small"),
    (5000, 512, 700, None, "does not fit"),
    (5000, 512, 2048, 0, "no text"),
])
def test_unusable_chunking_is_a_sentence(n_tokens, n_ctx, n_batch, chunks, words):
    with pytest.raises(QuantDeskError) as err:
        plan_chunks(n_tokens, n_ctx, n_batch, chunks, "notes.txt")
    assert words in str(err.value)


def test_full_record_gives_the_exact_kl_divergence_and_small_k_a_close_lower_bound():
    rng = np.random.default_rng(0)
    n, vocab = 40, 3000
    base = _logits(rng, n, vocab)
    quant = base + _logits(rng, n, vocab, scale=0.3)
    tokens = rng.integers(0, vocab, n)
    p, q = _log_softmax(base), _log_softmax(quant)
    exact = (np.exp(p) * (p - q)).sum(axis=1)

    full = compare_rows(quant, tokens, base_rows(base, tokens, k=vocab))
    np.testing.assert_allclose(full.kld, exact, rtol=1e-5, atol=1e-9)
    np.testing.assert_allclose(full.nll, -q[np.arange(n), tokens], rtol=1e-6)
    np.testing.assert_allclose(full.nll_base, -p[np.arange(n), tokens], rtol=1e-6)
    np.testing.assert_allclose(full.p_diff, np.exp(q[np.arange(n), tokens]) - np.exp(p[np.arange(n), tokens]),
                               atol=1e-7)
    assert (full.same_top == (quant.argmax(axis=1) == base.argmax(axis=1))).all()

    lumped = compare_rows(quant, tokens, base_rows(base, tokens, k=64))
    assert (lumped.kld <= exact + 1e-7).all()  # the tail as one outcome: a lower bound
    assert lumped.kld.mean() < 0.97 * exact.mean()
    np.testing.assert_array_equal(lumped.same_top, full.same_top)
    np.testing.assert_allclose(lumped.nll_base, full.nll_base)
    # tokens drawn from the tail: unbiased, so the mean comes close
    sampled = [compare_rows(quant, tokens, base_rows(base, tokens, k=64, m=64, seed=s)).kld.mean()
               for s in range(4)]
    assert abs(np.mean(sampled) / exact.mean() - 1) < 0.02
    again = compare_rows(quant, tokens, base_rows(base, tokens, k=64, m=64, seed=0)).kld
    assert again.mean() == sampled[0]  # the same seed draws the same tokens


def test_record_keeps_the_most_likely_tokens_lowest_id_first_on_ties():
    logits = np.array([[0.0, 5.0, 1.0, 5.0, 2.0, 2.0, 2.0]], dtype=np.float32)
    rows = base_rows(logits, np.array([4]), k=4)
    assert rows.top_ids.tolist() == [[1, 3, 4, 5]]
    # the tail: tokens 0, 2 and 6
    e = np.exp(logits[0].astype(np.float64) - 5.0)
    np.testing.assert_allclose(np.exp(rows.log_rest[0]), (e[0] + e[2] + e[6]) / e.sum(), rtol=1e-6)
    # a model identical to the base: zero divergence, same top token
    same = compare_rows(logits, np.array([4]), rows)
    assert abs(same.kld[0]) < 1e-7 and same.same_top[0]


def test_statistics_use_llama_cpp_formulas():
    rng = np.random.default_rng(1)
    n = 500
    nll_base = rng.gamma(2.0, 1.0, n)
    nll = nll_base + rng.normal(0.02, 0.1, n)
    kld = rng.gamma(1.0, 0.05, n)
    p_diff = rng.normal(0, 0.05, n)
    same = rng.random(n) < 0.9
    stats = QualityStats.from_comparison(Comparison(nll, nll_base, kld, p_diff, same))
    assert stats.ppl[0] == pytest.approx(math.exp(nll.mean()))
    assert stats.ppl[1] == pytest.approx(math.exp(nll.mean()) * nll.std() / math.sqrt(n - 1))
    assert stats.mean_kld[0] == pytest.approx(kld.mean())
    assert stats.mean_kld[1] == pytest.approx(kld.std() / math.sqrt(n - 1))
    assert stats.same_top[0] == pytest.approx(same.mean())
    cov = np.cov(nll, nll_base, bias=True)[0, 1] / (n - 1)
    assert stats.ln_ppl_ratio[1] == pytest.approx(math.sqrt(nll.var() / (n - 1) + nll_base.var() / (n - 1) - 2 * cov))
    assert stats.kld_median == pytest.approx(np.median(kld), rel=1e-6)
    assert stats.kld_percentiles["99.0%"] == pytest.approx(np.percentile(kld, 99.0), rel=1e-5)
    text = stats.format()
    for label in ("Mean PPL(Q)                   :", "Mean    KLD:", "99.9%   KLD:", "Median  KLD:",
                  "RMS Δp    :", "Same top p:"):
        assert label in text
    record = stats.to_dict()
    for key in ("ppl", "base_ppl", "mean_kld", "same_top_percent"):
        assert isinstance(record[key], float) and isinstance(record[f"{key}_uncertainty"], float)
    assert record["same_top_percent"] == pytest.approx(100 * same.mean())


def test_perplexity_alone_and_percentile_edges():
    nll = np.array([1.0, 2.0, 3.0, 2.0])
    stats = PerplexityStats.from_nll(nll)
    assert stats.ppl == pytest.approx(math.exp(2.0))
    assert stats.format().startswith("Final estimate: PPL = 7.3891 +/- ")
    values = np.array([0.0, 1.0, 2.0, 3.0])
    assert percentile(values, 0.5) == 1.5 and percentile(values, 0) == 0 and percentile(values, 1) == 3
    assert token_nll(np.zeros((2, 4), np.float32), np.array([0, 3])) == pytest.approx([math.log(4)] * 2)


def test_base_pass_file_round_trips_and_its_cache_name_follows_source_and_text(tmp_path):
    rng = np.random.default_rng(2)
    plan = ChunkPlan(n_ctx=64, n_chunk=2, n_batch=128, n_seq=2)
    logits = _logits(rng, 2 * plan.scored_per_chunk, 500)
    tokens = rng.integers(0, 500, 128).astype(np.int32)
    data = BaseData(plan, 500, "abc", tokens, base_rows(logits, tokens[:62], 16, 8), 16, 8, "base.gguf")
    path = tmp_path / "cache" / "b.npz"
    data.save(path)
    back = BaseData.load(path)
    assert back.plan == plan and back.vocab_digest == "abc" and back.top_k == 16
    np.testing.assert_array_equal(back.rows.top_ids, data.rows.top_ids)
    np.testing.assert_array_equal(back.chunk_rows(1).token_logprob, data.rows.token_logprob[31:62])
    assert [p.name for p in path.parent.iterdir()] == ["b.npz"]  # no temporary file left

    source = tmp_path / "m.gguf"
    source.write_bytes(b"x")
    first = cache_path(tmp_path, source, b"text", 512, None, 2048, 128, 64)
    assert first == cache_path(tmp_path, source, b"text", 512, None, 2048, 128, 64)
    assert first != cache_path(tmp_path, source, b"other text", 512, None, 2048, 128, 64)
    assert first != cache_path(tmp_path, source, b"text", 256, None, 2048, 128, 64)
    source.write_bytes(b"xy")
    assert first != cache_path(tmp_path, source, b"text", 512, None, 2048, 128, 64)

    path.write_bytes(b"not a pass")
    with pytest.raises(QuantDeskError, match="cannot be used"):
        BaseData.load(path)


def test_saved_imatrix_has_llama_imatrix_layout_and_reads_back(tmp_path):
    sums = {"blk.1.ffn_down.weight": np.arange(8, dtype=np.float32).reshape(1, 8),
            "blk.0.attn_q.weight": np.full((1, 4), 6.0, np.float32),
            "blk.0.ffn_up_exps.weight": np.arange(12, dtype=np.float32).reshape(3, 4)}
    counts = {"blk.1.ffn_down.weight": np.array([2]), "blk.0.attn_q.weight": np.array([3]),
              "blk.0.ffn_up_exps.weight": np.array([1, 0, 4])}
    path = save_imatrix(tmp_path / "m.imatrix.gguf", sums, counts, ["calib.txt"], 7, 512)
    reader = GGUFReader(path)
    assert [f for f in reader.fields if not f.startswith("GGUF.")] == [
        "general.type", "imatrix.datasets", "imatrix.chunk_count", "imatrix.chunk_size"]
    assert [t.name for t in reader.tensors] == [
        "blk.0.attn_q.weight.in_sum2", "blk.0.attn_q.weight.counts",
        "blk.0.ffn_up_exps.weight.in_sum2", "blk.0.ffn_up_exps.weight.counts",
        "blk.1.ffn_down.weight.in_sum2", "blk.1.ffn_down.weight.counts"]
    # ggml's ne, trailing 1s dropped as gguf_add_tensor does: a dense weight's tensors are 1-D
    assert [t.shape.tolist() for t in reader.tensors] == [[4], [1], [4, 3], [1, 3], [8], [1]]
    matrix = load_imatrix(path)
    assert matrix.datasets == ["calib.txt"] and matrix.chunk_count == 7
    np.testing.assert_allclose(matrix.entries["blk.0.attn_q.weight"], [2.0] * 4)
    np.testing.assert_allclose(matrix.entries["blk.0.ffn_up_exps.weight"],
                               [0, 1, 2, 3, 1, 1, 1, 1, 2, 2.25, 2.5, 2.75])
