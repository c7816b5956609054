"""Q2_K, Q3_K, Q4_K, Q5_K and Q6_K: llama.cpp's 256-value super-block types, byte-exact.

A super-block of 256 values is cut into sub-blocks (16 x 16 for Q2_K/Q3_K/Q6_K, 8 x 32
for Q4_K/Q5_K). Each sub-block gets a scale (and for Q2/Q4/Q5 an offset) from a search in
:mod:`quantize.blocks.searches`; those are quantized against one fp16 super-scale, and the
values are then re-quantized with the scales as stored. Layouts (bytes)::

    Q2_K  | scales[16] = sc | m << 4 | qs[64] 2-bit | d | dmin |              84
    Q3_K  | hmask[32] | qs[64] 2-bit | scales[12] 6-bit signed+32 | d |        110
    Q4_K  | d | dmin | scales[12] 6-bit sc, m | qs[128] 4-bit |               144
    Q5_K  | d | dmin | scales[12] | qh[32] | qs[128] |                       176
    Q6_K  | ql[128] | qh[64] | scales[16] int8 | d |                          210

    2-bit qs:  qs[32h + l] = L[128h + l] | L[128h+l+32] << 2 | L[+64] << 4 | L[+96] << 6
    Q3 hmask:  bit t of hmask[l] is set when value 32t + l has level > 3 (qs keeps level - 4)
    4-bit qs:  qs[32k + l] = L[64k + l] | L[64k + l + 32] << 4
    Q5 qh:     bit t of qh[l] = 5th bit of L[32t + l]
    Q4/Q5 scales (sc_j, m_j 6-bit, j = 0..7):
        j < 4: byte j = sc_j (+ hi bits of sc_{j+4} << 6), byte j+4 = m_j (+ hi of m_{j+4} << 6)
        j >= 4: byte j+4 = sc_j & 0xF | (m_j & 0xF) << 4
    Q3 scales (s_j = 6-bit, j = 0..15): low nibbles in bytes 0..7 (j < 8 low, j >= 8 high),
        2 high bits of s_j in byte 8 + j%4 at bit 2*(j/4)
    Q6:        ql[64h + l] = L[128h+l] & 0xF | (L[128h+l+64] & 0xF) << 4,
               ql[64h + l + 32] = L[128h+l+32] & 0xF | (L[128h+l+96] & 0xF) << 4,
               qh[32h + l] = sum_k (L[128h + l + 32k] >> 4) << 2k

Without an imatrix each type is ggml's ``quantize_row_*_ref``; with one it is
``quantize_row_*_impl`` (weights from the imatrix and the super-block's variance).
"""

from __future__ import annotations

from typing import Optional

import numpy as np
from gguf import GGMLQuantizationType as QT

from quantize.blocks.chunking import encode_blocks
from quantize.blocks.float_ops import (F32, first_abs_max, fp16_round, nearest_int, positive_max, seq_sum,
                                       to_fp16)
from quantize.blocks.searches import GROUP_MAX_EPS, q3_quants, qkx_quants, qp_quants, qx_quants
from quantize.encode import register_encoder

QK_K = 256


def _groups(x: np.ndarray, size: int) -> np.ndarray:
    """``(blocks, 256)`` -> positions-major ``(size, blocks * 256/size)`` sub-blocks."""
    return np.ascontiguousarray(x.reshape(-1, size).T)


def _ungroup(levels: np.ndarray, blocks: int) -> np.ndarray:
    """Inverse of :func:`_groups` for level arrays."""
    return np.ascontiguousarray(levels.T).reshape(blocks, QK_K)


def _superblock_sigma2(x: np.ndarray, factor: float) -> np.ndarray:
    """``factor * sum(x*x) / 256`` per super-block, summed left to right."""
    xt = np.ascontiguousarray(x.T)
    return (F32(factor) * seq_sum(xt * xt)) / F32(QK_K)


def _imatrix_weights(x: np.ndarray, qw: np.ndarray, sigma2: np.ndarray) -> np.ndarray:
    """``qw[l] * sqrtf(sigma2 + x[l]*x[l])`` for each value of each super-block."""
    return qw * np.sqrt(sigma2[:, None] + x * x)


def _requantize(x: np.ndarray, d: np.ndarray, offset: Optional[np.ndarray], levels: np.ndarray,
                lo: int, hi: int, bias: int) -> np.ndarray:
    """Final levels from the stored scales: ``clip(nearest_int((x + m) / d)) + bias``.

    Sub-blocks whose scale reads back as 0 keep the search's levels (C's ``if (!d) continue``).
    ``x``: ``(blocks, groups, size)``; ``d``/``offset``: ``(blocks, groups)``.
    """
    with np.errstate(all="ignore"):
        shifted = x if offset is None else x + offset[:, :, None]
        fresh = np.minimum(np.maximum(nearest_int(shifted / d[:, :, None]), lo), hi) + bias
    keep = (d == 0)[:, :, None]
    return np.where(keep, levels.reshape(x.shape), fresh.astype(np.uint8)).reshape(x.shape[0], QK_K)


def _pack_2bit(levels: np.ndarray) -> np.ndarray:
    q = levels.reshape(-1, 2, 4, 32)
    return (q[:, :, 0] | (q[:, :, 1] << 2) | (q[:, :, 2] << 4) | (q[:, :, 3] << 6)).reshape(-1, 64)


def _pack_4bit(levels: np.ndarray) -> np.ndarray:
    q = levels.reshape(-1, 4, 2, 32)
    return (q[:, :, 0] | (q[:, :, 1] << 4)).reshape(-1, 128)


def _fp16_bytes(values: np.ndarray) -> np.ndarray:
    return to_fp16(values).view(np.uint8).reshape(-1, 2)


def _max_positive(values: np.ndarray) -> np.ndarray:
    return positive_max(values, axis=1)


# ---- Q2_K ----------------------------------------------------------------------------------

def _q2_k_kernel(x: np.ndarray, qw: Optional[np.ndarray], _sigma: Optional[np.ndarray]) -> np.ndarray:
    blocks = x.shape[0]
    xg = _groups(x, 16)
    with np.errstate(all="ignore"):
        if qw is None:
            scales, mins, levels = qkx_quants(xg, np.abs(xg), 3, -0.5, 0.1, 15, use_mad=True)
            scales, mins = scales.reshape(blocks, 16), mins.reshape(blocks, 16)
            max_scale, max_min = _max_positive(scales), _max_positive(mins)
            sc_scale = (F32(15) / max_scale)[:, None]
            sc = np.where(max_scale[:, None] > 0, nearest_int(sc_scale * scales), 0)
            m_scale = (F32(15) / max_min)[:, None]
            m = np.where(max_min[:, None] > 0, nearest_int(m_scale * mins), 0)
            packed = ((sc & 0xFF) | ((m << 4) & 0xFF)).astype(np.uint8)
            d = np.where(max_scale > 0, max_scale / F32(15), F32(0))
            dmin = np.where(max_min > 0, max_min / F32(15), F32(0))
        else:
            sigma2 = _superblock_sigma2(x, 1.0)
            weights = _imatrix_weights(x, qw, sigma2)
            wg = _groups(weights, 16)
            scales, mins, levels = qkx_quants(xg, wg, 3, -0.9, 0.05, 36, use_mad=False)
            sw = seq_sum(wg).reshape(blocks, 16).T.copy()
            d, ls = qp_quants(scales.reshape(blocks, 16).T.copy(), 15, sw)
            dmin, lm = qp_quants(mins.reshape(blocks, 16).T.copy(), 15, sw)
            packed = ls.T | (lm.T << 4)
        d16, dmin16 = fp16_round(d), fp16_round(dmin)
        step = d16[:, None] * (packed & 0xF).astype(F32)
        offset = dmin16[:, None] * (packed >> 4).astype(F32)
    final = _requantize(x.reshape(blocks, 16, 16), step, offset, _ungroup(levels, blocks), 0, 3, 0)
    return np.concatenate([packed, _pack_2bit(final), _fp16_bytes(d), _fp16_bytes(dmin)], axis=1)


# ---- Q3_K ----------------------------------------------------------------------------------

def _pack_q3_scales(s: np.ndarray) -> np.ndarray:
    """16 six-bit values (0..63, int) -> the 12 scale bytes of a Q3_K block."""
    s = s.astype(np.uint8)
    low = s & 0xF
    out = np.empty((s.shape[0], 12), dtype=np.uint8)
    out[:, :8] = low[:, :8] | (low[:, 8:] << 4)
    high = (s >> 4).reshape(-1, 4, 4)  # [block, j // 4, j % 4]
    out[:, 8:] = high[:, 0] | (high[:, 1] << 2) | (high[:, 2] << 4) | (high[:, 3] << 6)
    return out


def _q3_k_kernel(x: np.ndarray, qw: Optional[np.ndarray], _sigma: Optional[np.ndarray]) -> np.ndarray:
    blocks = x.shape[0]
    xg = _groups(x, 16)
    with np.errstate(all="ignore"):
        if qw is None:
            scales, levels = q3_quants(xg, 4)
            scales = scales.reshape(blocks, 16)
            max_scale = first_abs_max(scales, axis=1)
            nonzero = (max_scale != 0)[:, None]
            iscale = F32(-32) / max_scale
            ints = nearest_int(iscale[:, None] * scales).astype(np.int8).astype(np.int32)
            six_bit = np.where(nonzero, np.minimum(np.maximum(ints, -32), 31) + 32, 0)
            d = np.where(max_scale != 0, F32(1) / iscale, F32(0))
        else:
            sigma2 = _superblock_sigma2(x, 2.0)
            wg = _groups(_imatrix_weights(x, qw, sigma2), 16)
            scales, levels = qx_quants(xg, 4, wg)
            sw = seq_sum(wg).reshape(blocks, 16).T.copy()
            d, six = qx_quants(scales.reshape(blocks, 16).T.copy(), 32, sw)
            six_bit = six.T.astype(np.int32)
        packed = _pack_q3_scales(six_bit)
        step = fp16_round(d)[:, None] * (six_bit - 32).astype(F32)
    final = _requantize(x.reshape(blocks, 16, 16), step, None, _ungroup(levels, blocks), -4, 3, 4)
    groups8 = final.reshape(blocks, 8, 32)
    high = groups8 > 3
    hmask = np.zeros((blocks, 32), dtype=np.uint8)
    for t in range(8):
        hmask |= high[:, t].astype(np.uint8) << t
    low = np.where(high, groups8 - 4, groups8).reshape(blocks, QK_K)
    return np.concatenate([hmask, _pack_2bit(low), packed, _fp16_bytes(d)], axis=1)


# ---- Q4_K / Q5_K ---------------------------------------------------------------------------

def _pack_k4_scales(ls: np.ndarray, lm: np.ndarray) -> np.ndarray:
    """Eight 6-bit scales and mins (uint8, C's wrap-around kept) -> 12 bytes."""
    out = np.empty((ls.shape[0], 12), dtype=np.uint8)
    out[:, 0:4] = ls[:, :4] | ((ls[:, 4:] >> 4) << 6)
    out[:, 4:8] = lm[:, :4] | ((lm[:, 4:] >> 4) << 6)
    out[:, 8:12] = (ls[:, 4:] & 0xF) | ((lm[:, 4:] & 0xF) << 4)
    return out


def _unpack_k4_scales(packed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``get_scale_min_k4`` for j = 0..7."""
    sc = np.empty((packed.shape[0], 8), dtype=np.uint8)
    m = np.empty_like(sc)
    sc[:, :4] = packed[:, 0:4] & 63
    m[:, :4] = packed[:, 4:8] & 63
    sc[:, 4:] = (packed[:, 8:12] & 0xF) | ((packed[:, 0:4] >> 6) << 4)
    m[:, 4:] = (packed[:, 8:12] >> 4) | ((packed[:, 4:8] >> 6) << 4)
    return sc, m


def _k4_scales(x: np.ndarray, qw: Optional[np.ndarray], nmax: int, ref_search: tuple[float, float, int],
               clamp_impl: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Shared Q4_K/Q5_K part: searches, scale quantization; returns d, dmin, packed, levels."""
    blocks = x.shape[0]
    xg = _groups(x, 32)
    if qw is None:
        sum_x2 = seq_sum(xg * xg)
        av_x = np.sqrt(sum_x2 / F32(32))
        rmin, rdelta, nstep = ref_search
        scales, mins, levels = qkx_quants(xg, av_x + np.abs(xg), nmax, rmin, rdelta, nstep, use_mad=False)
        scales, mins = scales.reshape(blocks, 8), mins.reshape(blocks, 8)
        max_scale, max_min = _max_positive(scales), _max_positive(mins)
        inv_scale = np.where(max_scale > 0, F32(63) / max_scale, F32(0))
        inv_min = np.where(max_min > 0, F32(63) / max_min, F32(0))
        ls = np.minimum(nearest_int(inv_scale[:, None] * scales).astype(np.uint8), 63)
        lm = np.minimum(nearest_int(inv_min[:, None] * mins).astype(np.uint8), 63)
        d, dmin = max_scale / F32(63), max_min / F32(63)
    else:
        sigma2 = _superblock_sigma2(x, 2.0)
        wg = _groups(_imatrix_weights(x, qw, sigma2), 32)
        scales, mins, levels = qkx_quants(xg, wg, nmax, -0.9, 0.05, 36, use_mad=False)
        sw = seq_sum(wg).reshape(blocks, 8).T.copy()
        d, ls = qp_quants(scales.reshape(blocks, 8).T.copy(), 63, sw)
        dmin, lm = qp_quants(mins.reshape(blocks, 8).T.copy(), 63, sw)
        ls, lm = ls.T, lm.T
        if clamp_impl:
            ls, lm = np.minimum(ls, 63), np.minimum(lm, 63)
    return d, dmin, _pack_k4_scales(ls, lm), levels


def _k4_final_levels(x: np.ndarray, d: np.ndarray, dmin: np.ndarray, packed: np.ndarray,
                     levels: np.ndarray, nmax: int) -> np.ndarray:
    blocks = x.shape[0]
    sc, m = _unpack_k4_scales(packed)
    with np.errstate(all="ignore"):
        step = fp16_round(d)[:, None] * sc.astype(F32)
        offset = fp16_round(dmin)[:, None] * m.astype(F32)
    return _requantize(x.reshape(blocks, 8, 32), step, offset, _ungroup(levels, blocks), 0, nmax, 0)


def _q4_k_kernel(x: np.ndarray, qw: Optional[np.ndarray], _sigma: Optional[np.ndarray]) -> np.ndarray:
    with np.errstate(all="ignore"):
        d, dmin, packed, levels = _k4_scales(x, qw, 15, (-1.0, 0.1, 20), clamp_impl=False)
    final = _k4_final_levels(x, d, dmin, packed, levels, 15)
    return np.concatenate([_fp16_bytes(d), _fp16_bytes(dmin), packed, _pack_4bit(final)], axis=1)


def _q5_k_kernel(x: np.ndarray, qw: Optional[np.ndarray], _sigma: Optional[np.ndarray]) -> np.ndarray:
    blocks = x.shape[0]
    with np.errstate(all="ignore"):
        d, dmin, packed, levels = _k4_scales(x, qw, 31, (-0.5, 0.1, 15), clamp_impl=True)
    final = _k4_final_levels(x, d, dmin, packed, levels, 31)
    fifth = (final.reshape(blocks, 8, 32) >> 4) & 1
    qh = np.zeros((blocks, 32), dtype=np.uint8)
    for t in range(8):
        qh |= fifth[:, t] << t
    return np.concatenate([_fp16_bytes(d), _fp16_bytes(dmin), packed, qh, _pack_4bit(final & 0xF)], axis=1)


# ---- Q6_K ----------------------------------------------------------------------------------

def _q6_k_kernel(x: np.ndarray, qw: Optional[np.ndarray], _sigma: Optional[np.ndarray]) -> np.ndarray:
    blocks = x.shape[0]
    xg = _groups(x, 16)
    with np.errstate(all="ignore"):
        scales, levels = qx_quants(xg, 32, None if qw is None else _groups(qw, 16))
        scales = scales.reshape(blocks, 16)
        max_scale = first_abs_max(scales, axis=1)
        empty = np.abs(max_scale) < GROUP_MAX_EPS
        iscale = F32(-128) / max_scale
        d = F32(1) / iscale
        sc = np.minimum(nearest_int(iscale[:, None] * scales), 127).astype(np.int8)
        step = fp16_round(d)[:, None] * sc.astype(F32)
    final = _requantize(x.reshape(blocks, 16, 16), step, None, _ungroup(levels, blocks), -32, 31, 32)
    q = final.reshape(blocks, 2, 4, 32)
    ql = np.concatenate([(q[:, :, 0] & 0xF) | ((q[:, :, 2] & 0xF) << 4),
                         (q[:, :, 1] & 0xF) | ((q[:, :, 3] & 0xF) << 4)], axis=2).reshape(blocks, 128)
    qh = ((q[:, :, 0] >> 4) | ((q[:, :, 1] >> 4) << 2) | ((q[:, :, 2] >> 4) << 4)
          | ((q[:, :, 3] >> 4) << 6)).reshape(blocks, 64)
    out = np.concatenate([ql, qh, sc.view(np.uint8), _fp16_bytes(d)], axis=1)
    out[empty] = 0
    return out


# ---- registration --------------------------------------------------------------------------

def _register(qtype: QT, kernel, block_bytes: int, chunk: int, chunk_with_imatrix: int) -> None:
    """Register ``kernel`` for ``qtype``; ``chunk*``: super-blocks per call (measured best)."""
    def encode(values: np.ndarray, imatrix: Optional[np.ndarray]) -> np.ndarray:
        return encode_blocks(values, imatrix, QK_K, block_bytes, kernel,
                             chunk if imatrix is None else chunk_with_imatrix)
    encode.__name__ = f"encode_{qtype.name.lower()}"
    encode.__doc__ = f"{qtype.name}: ggml's quantize_row_{qtype.name.lower()}_ref, or _impl with an imatrix."
    register_encoder(qtype)(encode)


# The 2-D searches work on (positions, groups) arrays that should stay in L2 (~256 SB);
# Q3_K's reference search is a loop over 16 positions of 1-D vectors, which wants many
# groups per numpy call to amortize its overhead.
_register(QT.Q2_K, _q2_k_kernel, 84, 512, 512)
_register(QT.Q3_K, _q3_k_kernel, 110, 1024, 512)
_register(QT.Q4_K, _q4_k_kernel, 144, 384, 384)
_register(QT.Q5_K, _q5_k_kernel, 176, 384, 384)
_register(QT.Q6_K, _q6_k_kernel, 210, 512, 512)
