"""Next-token distributions compared the way ``llama-perplexity --kl-divergence`` does.

Per scored position (see ``chunks.py``) the base model's pass keeps a :class:`BaseRows`
record: its ``k`` most likely tokens with their log-probabilities, the log-probability
of the token that actually follows, the log of the probability mass ``R`` outside the
top ``k``, and ``m`` tokens drawn from that remaining mass (with their log-probabilities).
Against the quant's full logits that gives, per position (:func:`compare_rows`):

* ``nll`` and ``nll_base``: minus the log-probability of the right token;
* ``kld``: Σ over the top ``k`` of ``p_base·(log p_base − log q)``, plus the tail's share
  ``R·E[log p_base − log q]`` over the tail's distribution, estimated from the ``m``
  drawn tokens. They are drawn by systematic sampling (one random offset, ``m`` evenly
  spaced points on the tail's cumulative mass, in token order), so every drawn token
  stands for ``R/m`` of the mass and the estimate is unbiased. Keeping only the top
  ``k`` and lumping the tail into one outcome (``R·log(R/Q)``) is a lower bound that
  missed a fifth of SmolLM2's KL divergence with ``k = 32`` (its distributions are
  flat), hence the samples. With ``k`` equal to the vocabulary the sum is exact.
  llama.cpp instead keeps every log-probability rounded to 16 bits and drops tokens
  below ``e^-16``;
* ``same_top``: whether both models' most likely token is the same (first index on ties);
* ``p_diff``: ``q(right token) − p_base(right token)``.

:class:`QualityStats` turns the per-position arrays into llama.cpp's statistics with its
formulas (uncertainties, covariance, percentiles with linear interpolation) and prints
them as llama-perplexity prints them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
import numpy as np

#: Rows of logits converted at once (bounds the float64 temporaries for large vocabularies).
_ROW_BLOCK = 16


def _lse_and_exp(logits: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row: max logit, log of Σ exp(l − max) (summed in float64, as llama.cpp), and
    the float32 exponentials themselves."""
    row_max = logits.max(axis=1)
    e = np.exp(logits - row_max[:, None])
    log_sum = np.log(e.sum(axis=1, dtype=np.float64))
    return row_max.astype(np.float64), log_sum, e


class _PerPosition:
    """Dataclass arrays with one entry (or row) per scored position."""

    @classmethod
    def concatenate(cls, parts: list) -> "_PerPosition":
        """All positions of ``parts``, in order."""
        return cls(*(np.concatenate([getattr(p, f.name) for p in parts]) for f in fields(cls)))

    def rows(self, begin: int, end: int) -> "_PerPosition":
        """Positions ``begin .. end-1``."""
        return type(self)(*(getattr(self, f.name)[begin:end] for f in fields(self)))


@dataclass
class BaseRows(_PerPosition):
    """The base model's compact record of some scored positions.

    Attributes:
        top_ids: ``(n, k)`` int32, most likely token first (lowest id first on ties).
        top_logprobs: ``(n, k)`` float32 log-probabilities of those tokens.
        token_logprob: ``(n,)`` float64 log-probability of the token that follows.
        log_rest: ``(n,)`` float64 log of the probability outside the top ``k``
            (``-inf`` when there is none).
        tail_ids: ``(n, m)`` int32 tokens drawn from the mass outside the top ``k``.
        tail_logprobs: ``(n, m)`` float32 log-probabilities of those tokens.
    """

    top_ids: np.ndarray
    top_logprobs: np.ndarray
    token_logprob: np.ndarray
    log_rest: np.ndarray
    tail_ids: np.ndarray
    tail_logprobs: np.ndarray


def _top_k(e: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` largest values per row, largest first, lowest index first on ties.

    The k-th largest value of a row is at least the k-th largest of every 8th value, so
    that threshold keeps every winner among a few hundred candidates, which are then
    sorted (stable, in index order): much cheaper than partitioning the whole vocabulary.
    """
    n, vocab = e.shape
    out = np.empty((n, min(k, vocab)), dtype=np.int32)
    for r in range(n):
        row = e[r]
        sample = row[::8]
        if k >= vocab:
            candidates = np.arange(vocab)
        elif sample.size > k:
            threshold = np.partition(sample, sample.size - k)[sample.size - k]
            candidates = np.flatnonzero(row >= threshold)
        else:
            candidates = np.argsort(-row, kind="stable")[:k]
            candidates.sort()
        order = np.argsort(-row[candidates], kind="stable")[:k]
        out[r] = candidates[order]
    return out


def _systematic_draws(weights: np.ndarray, total: np.ndarray, m: int, rng: np.random.Generator) -> np.ndarray:
    """``m`` indices per row, drawn with probability ``weights/total`` by systematic sampling."""
    ids = np.zeros((weights.shape[0], m), dtype=np.int32)
    if m == 0:
        return ids
    offsets = rng.random(weights.shape[0])
    for r in range(weights.shape[0]):
        if total[r] <= 0:
            continue
        cumulative = np.cumsum(weights[r], dtype=np.float64)
        points = (np.arange(m) + offsets[r]) * (cumulative[-1] / m)
        picked = np.minimum(np.searchsorted(cumulative, points, side="right"), weights.shape[1] - 1)
        ids[r] = picked
    return ids


def base_rows(logits: np.ndarray, next_tokens: np.ndarray, k: int, m: int = 0, seed: int = 0) -> BaseRows:
    """The compact record of the base model's ``logits`` (``(n, vocab)`` float32).

    Args:
        logits: The base model's logits at the scored positions.
        next_tokens: The token that follows each position.
        k: How many of the most likely tokens to keep (the vocabulary size keeps all).
        m: How many tokens to draw from the rest of the mass.
        seed: Seed of the draws (the same logits and seed give the same record).
    """
    rng = np.random.default_rng(seed)
    parts = []
    for b in range(0, logits.shape[0], _ROW_BLOCK):
        block = np.ascontiguousarray(logits[b:b + _ROW_BLOCK], dtype=np.float32)
        tokens = next_tokens[b:b + _ROW_BLOCK]
        row_max, log_sum, e = _lse_and_exp(block)
        lse = row_max + log_sum
        ids = _top_k(e, min(k, block.shape[1]))
        top = np.take_along_axis(block, ids, axis=1).astype(np.float64) - lse[:, None]
        token_lp = block[np.arange(block.shape[0]), tokens].astype(np.float64) - lse
        np.put_along_axis(e, ids, 0.0, axis=1)
        rest = e.sum(axis=1, dtype=np.float64)
        with np.errstate(divide="ignore"):
            log_rest = np.log(rest) - log_sum
        tail_ids = _systematic_draws(e, rest, m, rng)
        tail_lp = np.take_along_axis(block, tail_ids, axis=1).astype(np.float64) - lse[:, None]
        parts.append(BaseRows(ids, top.astype(np.float32), token_lp, log_rest, tail_ids,
                              tail_lp.astype(np.float32)))
    return BaseRows.concatenate(parts)


@dataclass
class Comparison(_PerPosition):
    """Per scored position: the quant against the base (see the module's docstring)."""

    nll: np.ndarray
    nll_base: np.ndarray
    kld: np.ndarray
    p_diff: np.ndarray
    same_top: np.ndarray


def compare_rows(logits: np.ndarray, next_tokens: np.ndarray, base: BaseRows) -> Comparison:
    """The quant's ``logits`` at the scored positions against the base's record of them."""
    parts = []
    for b in range(0, logits.shape[0], _ROW_BLOCK):
        block = np.ascontiguousarray(logits[b:b + _ROW_BLOCK], dtype=np.float32)
        rows = base.rows(b, b + block.shape[0])
        n = block.shape[0]
        row_max, log_sum, e = _lse_and_exp(block)
        lse = row_max + log_sum
        nll = lse - block[np.arange(n), next_tokens[b:b + n]].astype(np.float64)
        nll_base = -rows.token_logprob
        top_lp = rows.top_logprobs.astype(np.float64)
        q_top = np.take_along_axis(block, rows.top_ids, axis=1).astype(np.float64) - lse[:, None]
        kld = (np.exp(top_lp) * (top_lp - q_top)).sum(axis=1)
        np.put_along_axis(e, rows.top_ids, 0.0, axis=1)
        q_rest = e.sum(axis=1, dtype=np.float64)
        with np.errstate(divide="ignore"):
            log_q_rest = np.log(np.maximum(q_rest, np.finfo(np.float64).tiny)) - log_sum
        has_rest = np.isfinite(rows.log_rest)
        log_rest = np.where(has_rest, rows.log_rest, 0.0)
        m = rows.tail_ids.shape[1]
        if m:  # the tail's share, estimated from the drawn tokens
            q_tail = np.take_along_axis(block, rows.tail_ids, axis=1).astype(np.float64) - lse[:, None]
            share = (rows.tail_logprobs.astype(np.float64) - q_tail).mean(axis=1)
        else:  # the tail as one outcome: a lower bound
            share = log_rest - log_q_rest
        kld = kld + np.where(has_rest, np.exp(log_rest) * share, 0.0)
        same_top = block.argmax(axis=1) == rows.top_ids[:, 0]
        p_diff = np.exp(-nll) - np.exp(-nll_base)
        parts.append(Comparison(nll, nll_base, kld, p_diff, same_top))
    return Comparison.concatenate(parts)


def token_nll(logits: np.ndarray, next_tokens: np.ndarray) -> np.ndarray:
    """Minus the log-probability of each following token (perplexity without a base)."""
    out = []
    for b in range(0, logits.shape[0], _ROW_BLOCK):
        block = np.ascontiguousarray(logits[b:b + _ROW_BLOCK], dtype=np.float32)
        row_max, log_sum, _ = _lse_and_exp(block)
        n = block.shape[0]
        out.append(row_max + log_sum - block[np.arange(n), next_tokens[b:b + n]].astype(np.float64))
    return np.concatenate(out) if out else np.zeros(0)


# --- llama.cpp's statistics ---------------------------------------------------------------

def mean_and_uncertainty(values: np.ndarray) -> tuple[float, float]:
    """Mean and its standard error, as llama.cpp's ``mean_and_uncertainty`` (0 for ≤ 10 values)."""
    count = values.size
    if count < 1:
        return 0.0, 0.0
    mean = float(values.sum(dtype=np.float64) / count)
    var = float((values.astype(np.float64) ** 2).sum() / count - mean * mean)
    return mean, math.sqrt(var / (count - 1)) if var > 0 and count > 10 else 0.0


def covariance(a: np.ndarray, b: np.ndarray) -> float:
    """llama.cpp's covariance of two means (0 for fewer than 10 values)."""
    count = a.size
    if count < 10:
        return 0.0
    cov = float((a.astype(np.float64) * b).sum() / count - (a.sum() / count) * (b.sum() / count))
    return cov / (count - 1)


def percentile(sorted_values: np.ndarray, fraction: float) -> float:
    """llama.cpp's percentile: linear interpolation between neighbouring sorted values."""
    if fraction <= 0:
        return float(sorted_values[0])
    if fraction >= 1:
        return float(sorted_values[-1])
    p = fraction * (sorted_values.size - 1)
    ip = int(p)
    p -= ip
    return float((1 - p) * sorted_values[ip] + p * sorted_values[min(ip + 1, sorted_values.size - 1)])


def median(sorted_values: np.ndarray) -> float:
    """The middle value, or the mean of the two middle ones."""
    n = sorted_values.size
    return float(0.5 * (sorted_values[n // 2] + sorted_values[n // 2 - 1]) if n % 2 == 0
                 else sorted_values[n // 2])


KLD_PERCENTILES = (("99.9%", 0.999), ("99.0%", 0.990), ("95.0%", 0.950), ("90.0%", 0.900),
                   ("10.0%", 0.100), (" 5.0%", 0.050), (" 1.0%", 0.010), (" 0.1%", 0.001))
DP_PERCENTILES = (("99.9%", 0.999), ("99.0%", 0.990), ("95.0%", 0.950), ("90.0%", 0.900),
                  ("75.0%", 0.750), ("25.0%", 0.250), ("10.0%", 0.100), (" 5.0%", 0.050),
                  (" 1.0%", 0.010), (" 0.1%", 0.001))


@dataclass(frozen=True)
class PerplexityStats:
    """A model's perplexity alone (``llama-perplexity`` without a base)."""

    ppl: float
    ppl_uncertainty: float
    count: int

    @classmethod
    def from_nll(cls, nll: np.ndarray) -> "PerplexityStats":
        """From minus the log-probabilities of the scored tokens (llama.cpp's final estimate)."""
        count = nll.size
        mean = float(nll.sum(dtype=np.float64) / count)
        var = float((nll.astype(np.float64) ** 2).sum() / count - mean * mean)
        ppl = math.exp(mean)
        unc = math.sqrt(var / (count - 1)) * ppl if var > 0 and count > 1 else float("nan")
        return cls(ppl, unc, count)

    def format(self) -> str:
        """llama-perplexity's last line."""
        return f"Final estimate: PPL = {self.ppl:.4f} +/- {self.ppl_uncertainty:.5f}"

    def to_dict(self) -> dict:
        """Plain numbers for ``--json``."""
        return {"ppl": self.ppl, "ppl_uncertainty": self.ppl_uncertainty, "tokens": self.count}


@dataclass(frozen=True)
class QualityStats:
    """llama-perplexity's KL-divergence statistics of a quant against its base."""

    count: int
    ppl: tuple[float, float]
    base_ppl: tuple[float, float]
    ppl_correlation: float
    ln_ppl_ratio: tuple[float, float]
    ppl_ratio: tuple[float, float]
    ppl_diff: tuple[float, float]
    mean_kld: tuple[float, float]
    kld_max: float
    kld_min: float
    kld_median: float
    kld_percentiles: dict[str, float]
    mean_dp: tuple[float, float]
    dp_max: float
    dp_min: float
    dp_median: float
    dp_percentiles: dict[str, float]
    rms_dp: tuple[float, float]
    same_top: tuple[float, float]

    @classmethod
    def from_comparison(cls, c: Comparison) -> "QualityStats":
        """The statistics of the compared positions (llama.cpp's formulas)."""
        count = c.kld.size
        log_ppl, log_ppl_base = mean_and_uncertainty(c.nll), mean_and_uncertainty(c.nll_base)
        cov = covariance(c.nll, c.nll_base)
        ppl = math.exp(log_ppl[0])
        ppl_unc = ppl * log_ppl[1]
        base = math.exp(log_ppl_base[0])
        base_unc = base * log_ppl_base[1]
        denominator = log_ppl[1] * log_ppl_base[1]
        correlation = cov / denominator if denominator else float("nan")
        ratio_val = log_ppl[0] - log_ppl_base[0]
        ratio_unc = math.sqrt(max(0.0, log_ppl[1] ** 2 + log_ppl_base[1] ** 2 - 2.0 * cov))
        ppl_cov = ppl * base * cov
        diff_unc = math.sqrt(max(0.0, ppl_unc ** 2 + base_unc ** 2 - 2.0 * ppl_cov))
        kld_sorted = np.sort(c.kld.astype(np.float32))
        dp_sorted = np.sort(c.p_diff.astype(np.float32))
        mse = mean_and_uncertainty(c.p_diff.astype(np.float64) ** 2)
        rms = math.sqrt(mse[0])
        same = float(np.count_nonzero(c.same_top)) / count
        return cls(
            count=count, ppl=(ppl, ppl_unc), base_ppl=(base, base_unc), ppl_correlation=correlation,
            ln_ppl_ratio=(ratio_val, ratio_unc),
            ppl_ratio=(math.exp(ratio_val), math.exp(ratio_val) * ratio_unc),
            ppl_diff=(ppl - base, diff_unc),
            mean_kld=mean_and_uncertainty(c.kld),
            kld_max=float(kld_sorted[-1]), kld_min=float(kld_sorted[0]), kld_median=median(kld_sorted),
            kld_percentiles={name: percentile(kld_sorted, f) for name, f in KLD_PERCENTILES},
            mean_dp=mean_and_uncertainty(c.p_diff),
            dp_max=float(dp_sorted[-1]), dp_min=float(dp_sorted[0]), dp_median=median(dp_sorted),
            dp_percentiles={name: percentile(dp_sorted, f) for name, f in DP_PERCENTILES},
            rms_dp=(rms, 0.5 / rms * mse[1] if rms > 0 else 0.0),
            same_top=(same, math.sqrt(same * (1.0 - same) / (count - 1)) if count > 1 else 0.0),
        )

    def format(self) -> str:
        """The final sections of ``llama-perplexity --kl-divergence``, line for line."""
        k, d = self.kld_percentiles, self.dp_percentiles
        lines = [
            "====== Perplexity statistics ======",
            f"Mean PPL(Q)                   : {self.ppl[0]:10.6f} ± {self.ppl[1]:10.6f}",
            f"Mean PPL(base)                : {self.base_ppl[0]:10.6f} ± {self.base_ppl[1]:10.6f}",
            f"Cor(ln(PPL(Q)), ln(PPL(base))): {100.0 * self.ppl_correlation:6.2f}%",
            f"Mean ln(PPL(Q)/PPL(base))     : {self.ln_ppl_ratio[0]:10.6f} ± {self.ln_ppl_ratio[1]:10.6f}",
            f"Mean PPL(Q)/PPL(base)         : {self.ppl_ratio[0]:10.6f} ± {self.ppl_ratio[1]:10.6f}",
            f"Mean PPL(Q)-PPL(base)         : {self.ppl_diff[0]:10.6f} ± {self.ppl_diff[1]:10.6f}",
            "",
            "====== KL divergence statistics ======",
            f"Mean    KLD: {self.mean_kld[0]:10.6f} ± {self.mean_kld[1]:10.6f}",
            f"Maximum KLD: {self.kld_max:10.6f}",
            *(f"{name}   KLD: {k[name]:10.6f}" for name in ("99.9%", "99.0%", "95.0%", "90.0%")),
            f"Median  KLD: {self.kld_median:10.6f}",
            *(f"{name}   KLD: {k[name]:10.6f}" for name in ("10.0%", " 5.0%", " 1.0%", " 0.1%")),
            f"Minimum KLD: {self.kld_min:10.6f}",
            "",
            "====== Token probability statistics ======",
            f"Mean    Δp: {100.0 * self.mean_dp[0]:6.3f} ± {100.0 * self.mean_dp[1]:5.3f} %",
            f"Maximum Δp: {100.0 * self.dp_max:6.3f}%",
            *(f"{name}   Δp: {100.0 * d[name]:6.3f}%" for name in ("99.9%", "99.0%", "95.0%", "90.0%", "75.0%")),
            f"Median  Δp: {100.0 * self.dp_median:6.3f}%",
            *(f"{name}   Δp: {100.0 * d[name]:6.3f}%" for name in ("25.0%", "10.0%", " 5.0%", " 1.0%", " 0.1%")),
            f"Minimum Δp: {100.0 * self.dp_min:6.3f}%",
            f"RMS Δp    : {100.0 * self.rms_dp[0]:6.3f} ± {100.0 * self.rms_dp[1]:5.3f} %",
            f"Same top p: {100.0 * self.same_top[0]:6.3f} ± {100.0 * self.same_top[1]:5.3f} %",
        ]
        return "\n".join(lines)

    def to_dict(self) -> dict:
        """Plain numbers for ``--json`` and the Library (percent where the name says so)."""
        def pair(name: str, value: tuple[float, float], scale: float = 1.0) -> dict:
            return {name: value[0] * scale, f"{name}_uncertainty": value[1] * scale}

        out: dict = {"tokens": self.count}
        out |= pair("ppl", self.ppl) | pair("base_ppl", self.base_ppl)
        out |= pair("ln_ppl_ratio", self.ln_ppl_ratio) | pair("ppl_ratio", self.ppl_ratio)
        out |= pair("delta_ppl", self.ppl_diff) | {"ppl_correlation": self.ppl_correlation}
        out |= pair("mean_kld", self.mean_kld)
        out["kld_percentiles"] = {"max": self.kld_max, **{n.strip(): v for n, v in self.kld_percentiles.items()},
                                  "median": self.kld_median, "min": self.kld_min}
        out |= pair("mean_delta_p_percent", self.mean_dp, 100.0) | pair("rms_delta_p_percent", self.rms_dp, 100.0)
        out["delta_p_percentiles_percent"] = {
            "max": 100.0 * self.dp_max, **{n.strip(): 100.0 * v for n, v in self.dp_percentiles.items()},
            "median": 100.0 * self.dp_median, "min": 100.0 * self.dp_min}
        out |= pair("same_top_percent", self.same_top, 100.0)
        return out

