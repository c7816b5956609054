"""IQ3_XXS and IQ3_S: llama.cpp's 3-bit grid types, compiled, byte-exact.

A super-block of 256 values is cut into eight 32-value groups, each into eight 4-value
quads. A quad's magnitudes become the index of one point of a 4-D grid
(:mod:`.iq_grids`: 256 points for IQ3_XXS, 512 for IQ3_S) and its signs are stored
apart. Layouts (bytes)::

    IQ3_XXS | d | grid[64] | scales_and_signs[8] (uint32) |                           98
              scales_and_signs[g] = s0 | s1 << 7 | s2 << 14 | s3 << 21 | scale << 28
              (s_k: 7 sign bits of the k-th 8 values; the 8th is their parity, kept even
              by flipping the sign of the value that costs least)
    IQ3_S   | d | grid_lo[64] | grid_hi[8] (bit k of byte g: 9th bit of quad k) |
              signs[32] (one bit a value) | scales[4] (two 4-bit group scales) |     110

    group scale = d * (2*scale + 1); value = group scale * coordinate * sign

Both are ggml's ``quantize_row_iq3_*_impl``: per group, 31 (IQ3_XXS) or 19 (IQ3_S)
trial scales; quads off the grid go to their best-weighted neighbour; the scale with the
largest ``sumqx²/sumq2`` wins, then off-grid quads are re-fitted to it. Weights are
``x²`` without an imatrix. The 64 groups of eight blocks are searched together, as the
lanes of :func:`.grid_search.group_search_lanes`. One quirk is kept on purpose: in IQ3_S a group that is all
zero does not advance the grid and sign cursors, so the groups after it are stored one
slot earlier (llama.cpp's files are so).
"""

from __future__ import annotations

import numpy as np

from quantize.blocks.grid_search import (REFIT_ALL_IF_OFF_GRID, REFIT_OFF_GRID, even_signs, group_max,
                                         group_search_lanes, group_weights, lane_arrays, lane_point, plain_signs,
                                         positive_scale, put_lane, reset_lanes, scale_nibble, sum_squares)
from quantize.blocks.jit import F32, kernel, put_fp16

_ZERO = F32(0.0)
_ONE = F32(1.0)
_STEP = F32(0.2)
_EPS_IQ3_XXS = F32(1e-8)


#: Blocks per batch: their groups are the lanes of one search (:func:`.grid_search.group_search_lanes`).
BATCH = 8


@kernel
def iq3_xxs(x, qw, blocks_per_row, out, points, kmap, neighbours):
    """``quantize_iq3_xxs``: ``x`` ``(blocks, 256)`` float32, ``qw`` one row's imatrix or empty."""
    use_qw = qw.shape[0] > 0
    lanes = 8 * BATCH
    weight = np.empty(32, np.float32)
    waux = np.empty(32, np.float32)
    xval = np.empty(32, np.float32)
    xt, wt, at, levels, top, scale, active, signs = lane_arrays(32, lanes, 4)
    for first in range(0, x.shape[0], BATCH):
        count = min(BATCH, x.shape[0] - first)
        reset_lanes(8 * count, xt, wt, at, levels, top, scale, active)
        for b in range(count):
            xb = x[first + b]
            sigma2 = F32(2.0) * sum_squares(xb, 256) / F32(256.0)
            qw_at = ((first + b) % blocks_per_row) * 256
            for ib in range(8):
                g = 8 * b + ib
                group_weights(xb, 32 * ib, 32, qw, qw_at + 32 * ib, use_qw, sigma2, weight, waux)
                for k in range(4):
                    signs[g, k] = even_signs(xb, 32 * ib + 8 * k, weight, 8 * k, xval, 8 * k)
                group_top = group_max(xval, 32)
                put_lane(g, 32, xval, weight, waux, xt, wt, at, levels)
                if group_top >= _EPS_IQ3_XXS:
                    active[g] = True
                    top[g] = group_top
                    scale[g] = group_top / F32(15.0)
        group_search_lanes(xt, wt, at, active, 4, 3, 8, top, scale, _STEP, 15, REFIT_OFF_GRID,
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
                for k in range(8):
                    out[blk, 2 + 8 * ib + k] = np.uint8(kmap[lane_point(levels, g, 4 * k, 4, 3)] & 0xFF)
                max_scale = max_scale if max_scale > s else s
            if max_scale == _ZERO:
                out[blk, :] = 0
                continue
            d = max_scale / F32(31.0)
            put_fp16(out, blk, 0, d * F32(1.0125))  # ggml's fudge factor
            inv = _ONE / d
            for ib in range(8):
                g = 8 * b + ib
                word = np.int64(0)
                if active[g]:
                    word = np.int64(signs[g, 0] | (signs[g, 1] << 7) | (signs[g, 2] << 14) | (signs[g, 3] << 21))
                word |= np.int64(scale_nibble(inv, scale[g])) << 28
                for byte in range(4):
                    out[blk, 66 + 4 * ib + byte] = np.uint8((word >> (8 * byte)) & 0xFF)


@kernel
def iq3_s(x, qw, blocks_per_row, out, points, kmap, neighbours):
    """``quantize_iq3_s``: ``x`` ``(blocks, 256)`` float32, ``qw`` one row's imatrix or empty."""
    use_qw = qw.shape[0] > 0
    lanes = 8 * BATCH
    weight = np.empty(32, np.float32)
    waux = np.empty(32, np.float32)
    xval = np.empty(32, np.float32)
    xt, wt, at, levels, top, scale, active, signs = lane_arrays(32, lanes, 4)
    for first in range(0, x.shape[0], BATCH):
        count = min(BATCH, x.shape[0] - first)
        reset_lanes(8 * count, xt, wt, at, levels, top, scale, active)
        for b in range(count):
            xb = x[first + b]
            sigma2 = F32(2.0) * sum_squares(xb, 256) / F32(256.0)
            qw_at = ((first + b) % blocks_per_row) * 256
            for ib in range(8):
                g = 8 * b + ib
                group_weights(xb, 32 * ib, 32, qw, qw_at + 32 * ib, use_qw, sigma2, weight, waux)
                for k in range(4):
                    signs[g, k] = plain_signs(xb, 32 * ib + 8 * k, xval, 8 * k)
                group_top = group_max(xval, 32)
                put_lane(g, 32, xval, weight, waux, xt, wt, at, levels)
                if group_top != _ZERO:
                    active[g] = True
                    top[g] = group_top
                    scale[g] = group_top / F32(15.0)
        group_search_lanes(xt, wt, at, active, 4, 3, 8, top, scale, _STEP, 9, REFIT_ALL_IF_OFF_GRID,
                           points, kmap, neighbours, levels)
        for b in range(count):
            blk = first + b
            out[blk, :] = 0
            max_scale = _ZERO
            qs_at = 2  # the cursors a zero group leaves where they are
            signs_at = 74
            for ib in range(8):
                g = 8 * b + ib
                if not active[g]:
                    scale[g] = _ZERO
                    continue
                s = positive_scale(g, scale, signs, 0xFF)
                for k in range(8):
                    index = kmap[lane_point(levels, g, 4 * k, 4, 3)]
                    out[blk, qs_at + k] = np.uint8(index & 0xFF)
                    out[blk, 66 + ib] |= np.uint8(((index >> 8) << k) & 0xFF)
                qs_at += 8
                for k in range(4):
                    out[blk, signs_at + k] = np.uint8(signs[g, k])
                signs_at += 4
                max_scale = max_scale if max_scale > s else s
            if max_scale == _ZERO:
                continue
            d = max_scale / F32(31.0)
            put_fp16(out, blk, 0, d * F32(1.033))  # ggml's fudge factor
            inv = _ONE / d
            for ib in range(0, 8, 2):
                out[blk, 106 + ib // 2] = np.uint8(scale_nibble(inv, scale[8 * b + ib])
                                                   | (scale_nibble(inv, scale[8 * b + ib + 1]) << 4))
