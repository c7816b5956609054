"""IQ2_XXS, IQ2_XS and IQ2_S: llama.cpp's 2-bit grid types, compiled, byte-exact.

Values go by eights: an 8-value point's magnitudes are the index of one point of an 8-D
grid (:mod:`.iq_grids`: 256, 512 or 1024 points with coordinates 1, 3, 5), its signs
are stored apart (IQ2_XXS, IQ2_XS: 7 bits, the 8th making their number even). Layouts
(bytes, 256 values)::

    IQ2_XXS | d | 8 x (uint32 grid: 4 point indices | uint32 signs: 4 x 7 bits | scale << 28) |  66
    IQ2_XS  | d | 32 x uint16 (9-bit point index | 7 sign bits << 9) | scales[8] (2 x 4 bits) |  74
    IQ2_S   | d | idx_lo[32] | signs[32] (8 bits a point) | idx_hi[8] (2 bits a point) |
              scales[8] |                                                                   82

    group scale = d * (2*scale + 1) / 8 when decoding: 32-value groups (IQ2_XXS), 16 (the others)

The searches are ggml's ``quantize_row_iq2_*_impl`` (:func:`.grid_search.group_search`);
IQ2_XXS starts from ``make_qp_quants`` on the magnitudes. IQ2_XXS and IQ2_XS need an
importance matrix (libggml asserts one); IQ2_S without one weighs ``sigma2/4 + x²``.
"""

from __future__ import annotations

import numpy as np

from quantize.blocks.grid_search import (REFIT_ALL, REFIT_OFF_GRID, even_signs, group_max, group_search,
                                         group_weights, plain_signs, point_index, scale_nibble, sum_squares)
from quantize.blocks.jit import F32, GROUP_MAX_EPS, Int, kernel, put_fp16
from quantize.blocks.searches import qp_quants

_ZERO = F32(0.0)
_ONE = F32(1.0)
_STEP = F32(0.1)
_EPS_IQ2_S = F32(1e-8)


@kernel
def iq2_xxs(x, qw, blocks_per_row, out, points, kmap, neighbours):
    """``quantize_iq2_xxs``: ``x`` ``(blocks, 256)`` float32, ``qw`` one row's imatrix."""
    weight = np.empty(32, np.float32)
    waux = np.empty(32, np.float32)
    xval = np.empty(32, np.float32)
    levels = np.zeros(32, np.int32)
    trial = np.zeros(32, np.int32)
    scales = np.empty(8, np.float32)
    signs = np.empty(4, np.int32)
    grid_words = np.empty(8, np.int64)
    sign_words = np.empty(8, np.int64)
    column = np.empty((32, 1), np.float32)  # make_qp_quants works on lanes: one lane here
    column_w = np.empty((32, 1), np.float32)
    qp_scale = np.empty(1, np.float32)
    qp_levels = np.empty((32, 1), np.uint8)
    for blk in range(x.shape[0]):
        xb = x[blk]
        out[blk, :] = 0
        sigma2 = sum_squares(xb, 256) / F32(256.0)
        qw_at = (blk % blocks_per_row) * 256
        max_scale = _ZERO
        for ib in range(8):
            grid_words[ib] = 0
            sign_words[ib] = 0
            group_weights(xb, 32 * ib, 32, qw, qw_at + 32 * ib, True, sigma2, weight, waux)
            for k in range(4):
                signs[k] = even_signs(xb, 32 * ib + 8 * k, weight, 8 * k, xval, 8 * k)
            if group_max(xval, 32) < GROUP_MAX_EPS:
                scales[ib] = _ZERO
                continue
            for i in range(32):
                column[i, 0] = xval[i]
                column_w[i, 0] = weight[i]
            qp_quants(column, column_w, Int(4), qp_scale, qp_levels)
            scale = qp_scale[0]
            eff_max = scale * F32(3.0)
            if eff_max <= _ZERO:
                scales[ib] = _ZERO
                continue
            for i in range(32):
                levels[i] = qp_levels[i, 0]
            scale = group_search(xval, weight, waux, 32, 8, 2, 3, eff_max, scale, _STEP, 6, REFIT_ALL,
                                 points, kmap, neighbours, levels, trial)
            if scale < _ZERO:
                scale = -scale
                for k in range(4):
                    signs[k] = (~signs[k]) & 127
            for k in range(4):
                grid_words[ib] |= np.int64(kmap[point_index(levels, 8 * k, 8, 2)]) << (8 * k)
                sign_words[ib] |= np.int64(signs[k]) << (7 * k)
            scales[ib] = scale
            max_scale = max_scale if max_scale > scale else scale
        if max_scale == _ZERO:
            continue
        d = max_scale / F32(31.0)
        put_fp16(out, blk, 0, d)
        inv = _ONE / d
        for ib in range(8):
            sign_words[ib] |= np.int64(scale_nibble(inv, scales[ib])) << 28
            for b in range(4):
                out[blk, 2 + 8 * ib + b] = np.uint8((grid_words[ib] >> (8 * b)) & 0xFF)
                out[blk, 6 + 8 * ib + b] = np.uint8((sign_words[ib] >> (8 * b)) & 0xFF)


@kernel
def iq2_xs(x, qw, blocks_per_row, out, points, kmap, neighbours):
    """``quantize_iq2_xs``: ``x`` ``(blocks, 256)`` float32, ``qw`` one row's imatrix."""
    weight = np.empty(16, np.float32)
    waux = np.empty(16, np.float32)
    xval = np.empty(16, np.float32)
    levels = np.zeros(16, np.int32)
    trial = np.zeros(16, np.int32)
    scales = np.empty(16, np.float32)
    signs = np.empty(2, np.int32)
    for blk in range(x.shape[0]):
        xb = x[blk]
        out[blk, :] = 0
        sigma2 = sum_squares(xb, 256) / F32(256.0)
        qw_at = (blk % blocks_per_row) * 256
        max_scale = _ZERO
        for ib in range(16):
            group_weights(xb, 16 * ib, 16, qw, qw_at + 16 * ib, True, sigma2, weight, waux)
            for k in range(2):
                signs[k] = even_signs(xb, 16 * ib + 8 * k, weight, 8 * k, xval, 8 * k)
            top = group_max(xval, 16)
            for i in range(16):
                levels[i] = 0
            if top < GROUP_MAX_EPS:
                scales[ib] = _ZERO
                continue
            scale = group_search(xval, weight, waux, 16, 8, 2, 3, top, top / F32(5.0), _STEP, 9, REFIT_OFF_GRID,
                                 points, kmap, neighbours, levels, trial)
            if scale < _ZERO:
                scale = -scale
                for k in range(2):
                    signs[k] = (~signs[k]) & 127
            for k in range(2):
                word = kmap[point_index(levels, 8 * k, 8, 2)] | (signs[k] << 9)
                out[blk, 2 + 2 * (2 * ib + k)] = np.uint8(word & 0xFF)
                out[blk, 3 + 2 * (2 * ib + k)] = np.uint8((word >> 8) & 0xFF)
            scales[ib] = scale
            max_scale = max_scale if max_scale > scale else scale
        if max_scale == _ZERO:
            out[blk, :] = 0
            continue
        d = max_scale / F32(31.0)
        put_fp16(out, blk, 0, d)
        inv = _ONE / d
        for ib in range(0, 16, 2):
            out[blk, 66 + ib // 2] = np.uint8(scale_nibble(inv, scales[ib]) | (scale_nibble(inv, scales[ib + 1]) << 4))


@kernel
def iq2_s(x, qw, blocks_per_row, out, points, kmap, neighbours):
    """``quantize_iq2_s``: ``x`` ``(blocks, 256)`` float32, ``qw`` one row's imatrix or empty."""
    use_qw = qw.shape[0] > 0
    weight = np.empty(16, np.float32)
    waux = np.empty(16, np.float32)
    xval = np.empty(16, np.float32)
    levels = np.zeros(16, np.int32)
    trial = np.zeros(16, np.int32)
    scales = np.empty(16, np.float32)
    signs = np.empty(2, np.int32)
    for blk in range(x.shape[0]):
        xb = x[blk]
        out[blk, :] = 0
        sigma2 = F32(2.0) * sum_squares(xb, 256) / F32(256.0)
        qw_at = (blk % blocks_per_row) * 256
        max_scale = _ZERO
        for ib in range(16):
            if use_qw:
                group_weights(xb, 16 * ib, 16, qw, qw_at + 16 * ib, True, sigma2, weight, waux)
            else:
                for i in range(16):
                    v = xb[16 * ib + i]
                    weight[i] = F32(0.25) * sigma2 + v * v
                    waux[i] = np.sqrt(weight[i])
            for k in range(2):
                signs[k] = plain_signs(xb, 16 * ib + 8 * k, xval, 8 * k)
            top = group_max(xval, 16)
            for i in range(16):
                levels[i] = 0
            if top < _EPS_IQ2_S:
                scales[ib] = _ZERO
                continue
            scale = group_search(xval, weight, waux, 16, 8, 2, 3, top, top / F32(5.0), _STEP, 9, REFIT_OFF_GRID,
                                 points, kmap, neighbours, levels, trial)
            if scale < _ZERO:
                scale = -scale
                for k in range(2):
                    signs[k] = (~signs[k]) & 0xFF
            for k in range(2):
                point = 2 * ib + k
                index = kmap[point_index(levels, 8 * k, 8, 2)]
                out[blk, 2 + point] = np.uint8(index & 0xFF)
                out[blk, 66 + point // 4] |= np.uint8(((index >> 8) << (2 * (point % 4))) & 0xFF)
                out[blk, 34 + point] = np.uint8(signs[k])
            scales[ib] = scale
            max_scale = max_scale if max_scale > scale else scale
        if max_scale == _ZERO:
            continue
        d = max_scale / F32(31.0)
        put_fp16(out, blk, 0, d * F32(0.9875))  # ggml's fudge factor
        inv = _ONE / d
        for ib in range(0, 16, 2):
            out[blk, 74 + ib // 2] = np.uint8(scale_nibble(inv, scales[ib]) | (scale_nibble(inv, scales[ib + 1]) << 4))
