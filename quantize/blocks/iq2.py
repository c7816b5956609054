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

The searches are ggml's ``quantize_row_iq2_*_impl``, the groups of eight blocks at a
time as the lanes of :func:`.grid_search.group_search_lanes`;
IQ2_XXS starts from ``make_qp_quants`` on the magnitudes. IQ2_XXS and IQ2_XS need an
importance matrix (libggml asserts one); IQ2_S without one weighs ``sigma2/4 + x²``.
"""

from __future__ import annotations

import numpy as np

from quantize.blocks.grid_search import (REFIT_ALL, REFIT_OFF_GRID, even_signs, group_max, group_search_lanes,
                                         group_weights, lane_arrays, lane_point, plain_signs, positive_scale,
                                         put_lane, reset_lanes, scale_nibble, sum_squares)
from quantize.blocks.jit import F32, GROUP_MAX_EPS, Int, kernel, put_fp16
from quantize.blocks.searches import qp_quants

_ZERO = F32(0.0)
_ONE = F32(1.0)
_STEP = F32(0.1)
_EPS_IQ2_S = F32(1e-8)


#: Blocks per batch: their groups are the lanes of one search (:func:`.grid_search.group_search_lanes`).
BATCH = 8


@kernel
def iq2_xxs(x, qw, blocks_per_row, out, points, kmap, neighbours):
    """``quantize_iq2_xxs``: ``x`` ``(blocks, 256)`` float32, ``qw`` one row's imatrix."""
    lanes = 8 * BATCH
    weight = np.empty(32, np.float32)
    waux = np.empty(32, np.float32)
    xval = np.empty(32, np.float32)
    xt, wt, at, levels, top, scale, active, signs = lane_arrays(32, lanes, 4)
    nonzero = np.empty(lanes, np.bool_)
    qp_scale = np.empty(lanes, np.float32)
    qp_levels = np.empty((32, lanes), np.uint8)
    for first in range(0, x.shape[0], BATCH):
        count = min(BATCH, x.shape[0] - first)
        reset_lanes(8 * count, xt, wt, at, levels, top, scale, active)
        for b in range(count):
            xb = x[first + b]
            sigma2 = sum_squares(xb, 256) / F32(256.0)
            qw_at = ((first + b) % blocks_per_row) * 256
            for ib in range(8):
                g = 8 * b + ib
                group_weights(xb, 32 * ib, 32, qw, qw_at + 32 * ib, True, sigma2, weight, waux)
                for k in range(4):
                    signs[g, k] = even_signs(xb, 32 * ib + 8 * k, weight, 8 * k, xval, 8 * k)
                nonzero[g] = group_max(xval, 32) >= GROUP_MAX_EPS
                put_lane(g, 32, xval, weight, waux, xt, wt, at, levels)
        # every lane's start: make_qp_quants on its magnitudes (lanes whose group is zero
        # or past the batch's blocks are computed too, and not read)
        qp_quants(xt, wt, Int(4), qp_scale, qp_levels)
        for b in range(count):
            for ib in range(8):
                g = 8 * b + ib
                eff_max = qp_scale[g] * F32(3.0)
                if nonzero[g] and eff_max > _ZERO:
                    active[g] = True
                    top[g] = eff_max
                    scale[g] = qp_scale[g]
                    for i in range(32):
                        levels[i, g] = qp_levels[i, g]
        group_search_lanes(xt, wt, at, active, 8, 2, 3, top, scale, _STEP, 6, REFIT_ALL,
                           points, kmap, neighbours, levels)
        for b in range(count):
            blk = first + b
            out[blk, :] = 0
            max_scale = _ZERO
            for ib in range(8):
                g = 8 * b + ib
                if not active[g]:
                    scale[g] = _ZERO
                    continue
                s = positive_scale(g, scale, signs, 127)
                max_scale = max_scale if max_scale > s else s
            if max_scale == _ZERO:
                continue
            d = max_scale / F32(31.0)
            put_fp16(out, blk, 0, d)
            inv = _ONE / d
            for ib in range(8):
                g = 8 * b + ib
                grid_word = np.int64(0)
                sign_word = np.int64(scale_nibble(inv, scale[g])) << 28
                if active[g]:
                    for k in range(4):
                        grid_word |= np.int64(kmap[lane_point(levels, g, 8 * k, 8, 2)]) << (8 * k)
                        sign_word |= np.int64(signs[g, k]) << (7 * k)
                for byte in range(4):
                    out[blk, 2 + 8 * ib + byte] = np.uint8((grid_word >> (8 * byte)) & 0xFF)
                    out[blk, 6 + 8 * ib + byte] = np.uint8((sign_word >> (8 * byte)) & 0xFF)


@kernel
def iq2_xs(x, qw, blocks_per_row, out, points, kmap, neighbours):
    """``quantize_iq2_xs``: ``x`` ``(blocks, 256)`` float32, ``qw`` one row's imatrix."""
    lanes = 16 * BATCH
    weight = np.empty(16, np.float32)
    waux = np.empty(16, np.float32)
    xval = np.empty(16, np.float32)
    xt, wt, at, levels, top, scale, active, signs = lane_arrays(16, lanes, 2)
    for first in range(0, x.shape[0], BATCH):
        count = min(BATCH, x.shape[0] - first)
        reset_lanes(16 * count, xt, wt, at, levels, top, scale, active)
        for b in range(count):
            xb = x[first + b]
            sigma2 = sum_squares(xb, 256) / F32(256.0)
            qw_at = ((first + b) % blocks_per_row) * 256
            for ib in range(16):
                g = 16 * b + ib
                group_weights(xb, 16 * ib, 16, qw, qw_at + 16 * ib, True, sigma2, weight, waux)
                for k in range(2):
                    signs[g, k] = even_signs(xb, 16 * ib + 8 * k, weight, 8 * k, xval, 8 * k)
                group_top = group_max(xval, 16)
                put_lane(g, 16, xval, weight, waux, xt, wt, at, levels)
                if group_top >= GROUP_MAX_EPS:
                    active[g] = True
                    top[g] = group_top
                    scale[g] = group_top / F32(5.0)
        group_search_lanes(xt, wt, at, active, 8, 2, 3, top, scale, _STEP, 9, REFIT_OFF_GRID,
                           points, kmap, neighbours, levels)
        for b in range(count):
            blk = first + b
            out[blk, :] = 0
            max_scale = _ZERO
            for ib in range(16):
                g = 16 * b + ib
                if not active[g]:
                    scale[g] = _ZERO
                    continue
                s = positive_scale(g, scale, signs, 127)
                for k in range(2):
                    word = kmap[lane_point(levels, g, 8 * k, 8, 2)] | (signs[g, k] << 9)
                    out[blk, 2 + 2 * (2 * ib + k)] = np.uint8(word & 0xFF)
                    out[blk, 3 + 2 * (2 * ib + k)] = np.uint8((word >> 8) & 0xFF)
                max_scale = max_scale if max_scale > s else s
            if max_scale == _ZERO:
                out[blk, :] = 0
                continue
            d = max_scale / F32(31.0)
            put_fp16(out, blk, 0, d)
            inv = _ONE / d
            for ib in range(0, 16, 2):
                out[blk, 66 + ib // 2] = np.uint8(scale_nibble(inv, scale[16 * b + ib])
                                                  | (scale_nibble(inv, scale[16 * b + ib + 1]) << 4))


@kernel
def iq2_s(x, qw, blocks_per_row, out, points, kmap, neighbours):
    """``quantize_iq2_s``: ``x`` ``(blocks, 256)`` float32, ``qw`` one row's imatrix or empty."""
    use_qw = qw.shape[0] > 0
    lanes = 16 * BATCH
    weight = np.empty(16, np.float32)
    waux = np.empty(16, np.float32)
    xval = np.empty(16, np.float32)
    xt, wt, at, levels, top, scale, active, signs = lane_arrays(16, lanes, 2)
    for first in range(0, x.shape[0], BATCH):
        count = min(BATCH, x.shape[0] - first)
        reset_lanes(16 * count, xt, wt, at, levels, top, scale, active)
        for b in range(count):
            xb = x[first + b]
            sigma2 = F32(2.0) * sum_squares(xb, 256) / F32(256.0)
            qw_at = ((first + b) % blocks_per_row) * 256
            for ib in range(16):
                g = 16 * b + ib
                if use_qw:
                    group_weights(xb, 16 * ib, 16, qw, qw_at + 16 * ib, True, sigma2, weight, waux)
                else:
                    for i in range(16):
                        v = xb[16 * ib + i]
                        weight[i] = F32(0.25) * sigma2 + v * v
                        waux[i] = np.sqrt(weight[i])
                for k in range(2):
                    signs[g, k] = plain_signs(xb, 16 * ib + 8 * k, xval, 8 * k)
                group_top = group_max(xval, 16)
                put_lane(g, 16, xval, weight, waux, xt, wt, at, levels)
                if group_top >= _EPS_IQ2_S:
                    active[g] = True
                    top[g] = group_top
                    scale[g] = group_top / F32(5.0)
        group_search_lanes(xt, wt, at, active, 8, 2, 3, top, scale, _STEP, 9, REFIT_OFF_GRID,
                           points, kmap, neighbours, levels)
        for b in range(count):
            blk = first + b
            out[blk, :] = 0
            max_scale = _ZERO
            for ib in range(16):
                g = 16 * b + ib
                if not active[g]:
                    scale[g] = _ZERO
                    continue
                s = positive_scale(g, scale, signs, 0xFF)
                for k in range(2):
                    point = 2 * ib + k
                    index = kmap[lane_point(levels, g, 8 * k, 8, 2)]
                    out[blk, 2 + point] = np.uint8(index & 0xFF)
                    out[blk, 66 + point // 4] |= np.uint8(((index >> 8) << (2 * (point % 4))) & 0xFF)
                    out[blk, 34 + point] = np.uint8(signs[g, k])
                max_scale = max_scale if max_scale > s else s
            if max_scale == _ZERO:
                continue
            d = max_scale / F32(31.0)
            put_fp16(out, blk, 0, d * F32(0.9875))  # ggml's fudge factor
            inv = _ONE / d
            for ib in range(0, 16, 2):
                out[blk, 74 + ib // 2] = np.uint8(scale_nibble(inv, scale[16 * b + ib])
                                                  | (scale_nibble(inv, scale[16 * b + ib + 1]) << 4))
