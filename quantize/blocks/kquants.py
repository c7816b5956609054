"""Q2_K, Q3_K, Q4_K, Q5_K, Q6_K: llama.cpp's 256-value super-block types, compiled, byte-exact.

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
Super-blocks go through in batches of :data:`BATCH`; in a batch every sub-block is a
lane (:mod:`.lanes`), so the searches and the final re-quantization run 8 lanes a step.
"""

from __future__ import annotations

import numpy as np

from quantize.blocks.jit import (F32, GROUP_MAX_EPS, Flag, Int, f32, fp16_to_fp32, helper, inline, kernel, nearest_f,
                                 nearest_int, pick, put_fp16, stack_array)
from quantize.blocks.lanes import block_sum_squares, gather, imatrix_weights, lane_sums
from quantize.blocks.q3_search import q3_quants
from quantize.blocks.searches import first_abs_max, qkx_quants, qp_quants, qx_quants

QK_K = 256
BATCH = 16  # super-blocks per batch: 128 or 256 lanes, whose arrays stay in L1/L2
_ZERO = F32(0.0)
_IMPL_RMIN = F32(-0.9)  # make_qkx3_quants(..., -0.9f, 0.05f, 36, false) in every _impl
_IMPL_RDELTA = F32(0.05)


# ---- shared steps ------------------------------------------------------------------------------

@helper
def _requantize(xt, step, offset, use_offset, lo, hi, bias, found, levels):
    """``L = clip(nearest_int((x + m)/d), lo, hi) + bias`` per lane, where ``d != 0``.

    Lanes whose stored scale reads back as 0 keep the search's levels ``found`` (C's
    ``if (!d) continue``). Written to another array than ``found``: a select stored back
    in place compiles to masked stores, which AVX2 has not for bytes (a branch per value).
    """
    size, lanes = xt.shape
    flo = f32(lo)
    fhi = f32(hi)
    fbias = f32(bias)
    for i in range(size):
        for g in range(lanes):
            v = xt[i, g] + offset[g] if use_offset else xt[i, g]
            level = nearest_f(v / step[g])
            level = pick(level > fhi, fhi, level)
            level = pick(level < flo, flo, level)
            fresh = np.uint8(np.int32(level + fbias))
            levels[i, g] = pick(step[g] != _ZERO, fresh, found[i, g])


@inline
def _level(levels, count, size, b, v):
    """Level of value ``v`` of block ``b`` from the lane layout."""
    return np.int32(levels[v % size, (v // size) * count + b])


@helper
def _pack_2bit(out, blk, at, levels, count, size, b):
    for h in range(2):
        for l in range(32):
            v = 128 * h + l
            byte = (_level(levels, count, size, b, v) | (_level(levels, count, size, b, v + 32) << 2)
                    | (_level(levels, count, size, b, v + 64) << 4) | (_level(levels, count, size, b, v + 96) << 6))
            out[blk, at + 32 * h + l] = np.uint8(byte & 0xFF)


@helper
def _pack_4bit(out, blk, at, levels, count, b, mask):
    for k in range(4):
        for l in range(32):
            v = 64 * k + l
            lo = _level(levels, count, 32, b, v) & mask
            hi = _level(levels, count, 32, b, v + 32) & mask
            out[blk, at + 32 * k + l] = np.uint8((lo | (hi << 4)) & 0xFF)


@inline
def _largest_scale_and_min(scales, mins, count, subs, b):
    """Block ``b``'s ``if (scale > max_scale) max_scale = scale`` (and the same for the
    mins) from 0 over its ``subs`` sub-blocks: the _ref functions' super-scales."""
    max_scale = _ZERO
    max_min = _ZERO
    for j in range(subs):
        s = scales[j * count + b]
        max_scale = s if s > max_scale else max_scale
        m = mins[j * count + b]
        max_min = m if m > max_min else max_min
    return max_scale, max_min


@inline
def _sigma2(x, first, count, factor):
    """``factor*sumx2/QK_K`` per super-block (``sumx2`` left to right; Q2_K's factor 1 is no multiply)."""
    sigma2 = np.empty(count, np.float32)
    for b in range(count):
        total = block_sum_squares(x, first + b)
        sigma2[b] = (total if factor == 1 else f32(factor) * total) / f32(QK_K)
    return sigma2


@helper
def _batch_weights(x, qw, first, count, blocks_per_row, size, factor, raw, xt):
    """Gather a batch and its imatrix weights ``qw * sqrt(sigma2 + x*x)`` (or raw ``qw``)."""
    gather(x, first, count, size, xt)
    w = np.empty(xt.shape, np.float32)
    sigma2 = _sigma2(x, first, count, factor) if not raw else np.zeros(count, np.float32)
    imatrix_weights(xt, qw, first, count, blocks_per_row, size, sigma2, raw, w)
    return w


@helper
def _pack_k4_scales(out, blk, ls, lm):
    """Eight 6-bit scales and mins (C's uint8 wrap-around kept) -> 12 bytes at ``out[blk, 4:16]``."""
    sc = np.zeros(12, np.int32)
    for j in range(8):
        if j < 4:
            sc[j] = ls[j]
            sc[j + 4] = lm[j]
        else:
            sc[j + 4] = (ls[j] & 0xF) | ((lm[j] & 0xF) << 4)
            sc[j - 4] = (sc[j - 4] | ((ls[j] >> 4) << 6)) & 0xFF
            sc[j] = (sc[j] | ((lm[j] >> 4) << 6)) & 0xFF
    for k in range(12):
        out[blk, 4 + k] = np.uint8(sc[k] & 0xFF)


@inline
def _scale_min_k4(out, blk, j):
    """``get_scale_min_k4(j, y.scales)`` read back from the written bytes."""
    q = out[blk]
    if j < 4:
        return np.int32(q[4 + j]) & 63, np.int32(q[4 + j + 4]) & 63
    sc = (np.int32(q[4 + j + 4]) & 0xF) | ((np.int32(q[4 + j - 4]) >> 6) << 4)
    m = (np.int32(q[4 + j + 4]) >> 4) | ((np.int32(q[4 + j]) >> 6) << 4)
    return sc, m


# ---- Q2_K --------------------------------------------------------------------------------------

@helper
def _q2_k(x, qw, blocks_per_row, out, with_imatrix):
    blocks = x.shape[0]
    for first in range(0, blocks, BATCH):
        count = min(BATCH, blocks - first)
        lanes = 16 * count
        xt = np.empty((16, lanes), np.float32)
        found = np.empty((16, lanes), np.uint8)  # the search's levels
        levels = np.empty((16, lanes), np.uint8)
        scales = np.empty(lanes, np.float32)
        mins = np.empty(lanes, np.float32)
        packed = np.empty(lanes, np.int32)  # scales[j] = sc | m << 4, lane order
        step = np.empty(lanes, np.float32)
        offset = np.empty(lanes, np.float32)
        if with_imatrix:
            w = _batch_weights(x, qw, first, count, blocks_per_row, Int(16), Int(1), Flag(False), xt)
            sw = np.empty(lanes, np.float32)
            lane_sums(w, sw)
            qkx_quants(xt, w, Int(3), _IMPL_RMIN, _IMPL_RDELTA, Int(36), Flag(False), Flag(False), scales, mins, found)
            d_block = np.empty(count, np.float32)
            m_block = np.empty(count, np.float32)
            ls = np.empty((16, count), np.uint8)
            lm = np.empty((16, count), np.uint8)
            qp_quants(scales.reshape(16, count), sw.reshape(16, count), Int(15), d_block, ls)
            qp_quants(mins.reshape(16, count), sw.reshape(16, count), Int(15), m_block, lm)
            for b in range(count):
                for j in range(16):
                    packed[j * count + b] = (np.int32(ls[j, b]) | (np.int32(lm[j, b]) << 4)) & 0xFF
        else:
            gather(x, first, count, Int(16), xt)
            w = np.empty((16, lanes), np.float32)
            for i in range(16):
                for g in range(lanes):
                    w[i, g] = np.abs(xt[i, g])
            qkx_quants(xt, w, Int(3), F32(-0.5), F32(0.1), Int(15), Flag(True), Flag(True), scales, mins, found)
            d_block = np.empty(count, np.float32)
            m_block = np.empty(count, np.float32)
            for b in range(count):
                max_scale, max_min = _largest_scale_and_min(scales, mins, count, 16, b)
                for j in range(16):
                    packed[j * count + b] = 0
                if max_scale > _ZERO:
                    iscale = F32(15) / max_scale
                    for j in range(16):
                        packed[j * count + b] = nearest_int(iscale * scales[j * count + b]) & 0xFF
                    d_block[b] = max_scale / F32(15)
                else:
                    d_block[b] = _ZERO
                if max_min > _ZERO:
                    iscale = F32(15) / max_min
                    for j in range(16):
                        g = j * count + b
                        packed[g] = (packed[g] | (nearest_int(iscale * mins[g]) << 4)) & 0xFF
                    m_block[b] = max_min / F32(15)
                else:
                    m_block[b] = _ZERO
        for b in range(count):
            blk = first + b
            d = fp16_to_fp32(put_fp16(out, blk, 80, d_block[b]))
            dmin = fp16_to_fp32(put_fp16(out, blk, 82, m_block[b]))
            for j in range(16):
                g = j * count + b
                out[blk, j] = np.uint8(packed[g])
                step[g] = d * f32(packed[g] & 0xF)
                offset[g] = dmin * f32(packed[g] >> 4)
        _requantize(xt, step, offset, Flag(True), Int(0), Int(3), Int(0), found, levels)
        for b in range(count):
            _pack_2bit(out, first + b, 16, levels, count, 16, b)


@kernel
def q2_k(x, qw, blocks_per_row, out):
    """Q2_K of ``x[blocks, 256]``: ``quantize_row_q2_K_ref``, or ``_impl`` when ``qw`` is not empty."""
    _q2_k(x, qw, blocks_per_row, out, qw.size > 0)


# ---- Q3_K --------------------------------------------------------------------------------------

@helper
def _q3_k(x, qw, blocks_per_row, out, with_imatrix):
    blocks = x.shape[0]
    for first in range(0, blocks, BATCH):
        count = min(BATCH, blocks - first)
        lanes = 16 * count
        xt = np.empty((16, lanes), np.float32)
        found = np.empty((16, lanes), np.uint8)  # the search's levels
        levels = np.empty((16, lanes), np.uint8)
        scales = np.empty(lanes, np.float32)
        six = np.empty(lanes, np.int32)  # the 6-bit scales (l + 32), lane order
        d_block = np.empty(count, np.float32)
        step = np.empty(lanes, np.float32)
        if with_imatrix:
            w = _batch_weights(x, qw, first, count, blocks_per_row, Int(16), Int(2), Flag(False), xt)
            sw = np.empty(lanes, np.float32)
            lane_sums(w, sw)
            qx_quants(xt, w, Int(4), scales, found)
            ls = np.empty((16, count), np.uint8)
            qx_quants(scales.reshape(16, count), sw.reshape(16, count), Int(32), d_block, ls)
            for b in range(count):
                for j in range(16):
                    six[j * count + b] = np.int32(ls[j, b])
        else:
            gather(x, first, count, Int(16), xt)
            q3_quants(xt, Int(4), scales, found)
            signed_max = np.empty(count, np.float32)
            amax = np.empty(count, np.float32)
            first_abs_max(scales.reshape(16, count), signed_max, amax)
            for b in range(count):
                max_scale = signed_max[b]
                if max_scale != _ZERO:
                    iscale = F32(-32) / max_scale
                    for j in range(16):
                        g = j * count + b
                        l = np.int32(np.int8(nearest_int(iscale * scales[g])))  # int8_t l = nearest_int(..)
                        l = max(-32, min(31, l)) + 32
                        six[g] = l
                    d_block[b] = F32(1) / iscale
                else:
                    for j in range(16):
                        six[j * count + b] = 0
                    d_block[b] = _ZERO
        for b in range(count):
            blk = first + b
            for k in range(12):
                out[blk, 96 + k] = 0
            for j in range(16):
                l = six[j * count + b]
                if j < 8:
                    out[blk, 96 + j] = np.uint8(l & 0xF)
                else:
                    out[blk, 96 + j - 8] = np.uint8((np.int32(out[blk, 96 + j - 8]) | ((l & 0xF) << 4)) & 0xFF)
                at = 96 + 8 + j % 4
                out[blk, at] = np.uint8((np.int32(out[blk, at]) | ((l >> 4) << (2 * (j // 4)))) & 0xFF)
            d = fp16_to_fp32(put_fp16(out, blk, 108, d_block[b]))
            for j in range(16):
                g = j * count + b
                step[g] = d * f32(six[g] - 32)
        _requantize(xt, step, step, Flag(False), Int(-4), Int(3), Int(4), found, levels)
        _pack_q3(out, first, count, levels)


_Q3_PACKED_BYTES = 96 * BATCH  # hmask and qs of a batch


@helper
def _pack_q3(out, first, count, levels):
    """Q3_K's ``hmask`` (bit ``t`` of byte ``l``: level of value ``32t + l`` > 3) and 2-bit
    ``qs`` (the level's low 2 bits: ``level - 4`` when it is > 3) for a batch of blocks.

    Block ``b``'s level of value ``v`` is ``levels[v % 16, (v // 16)*count + b]``: for a
    given byte the blocks are contiguous, so each byte is computed for the whole batch
    in one vectorized loop into ``packed[byte, b]``, then copied to the blocks (a loop
    per block read every level on its own, and a loop storing to ``out`` stayed scalar).
    """
    packed = stack_array(_Q3_PACKED_BYTES, np.uint8)
    for l in range(32):
        for b in range(count):
            byte = 0
            for t in range(8):
                v = 32 * t + l
                byte |= np.int32(levels[v % 16, (v // 16) * count + b] > 3) << t
            packed[l * BATCH + b] = np.uint8(byte & 0xFF)
    for h in range(2):
        for l in range(32):
            for b in range(count):
                byte = 0
                for k in range(4):
                    v = 128 * h + l + 32 * k
                    byte |= (np.int32(levels[v % 16, (v // 16) * count + b]) & 3) << (2 * k)
                packed[(32 + 32 * h + l) * BATCH + b] = np.uint8(byte & 0xFF)
    for b in range(count):
        for j in range(96):
            out[first + b, j] = packed[j * BATCH + b]


@kernel
def q3_k(x, qw, blocks_per_row, out):
    """Q3_K of ``x[blocks, 256]``: ``quantize_row_q3_K_ref``, or ``_impl`` when ``qw`` is not empty."""
    _q3_k(x, qw, blocks_per_row, out, qw.size > 0)


# ---- Q4_K / Q5_K -------------------------------------------------------------------------------

@helper
def _k4(x, qw, blocks_per_row, out, with_imatrix, nmax, rmin, rdelta, nstep, clamp_impl, five_bits):
    """Q4_K (``nmax`` 15) and Q5_K (31): searches, 6-bit scales and mins, levels, packing."""
    blocks = x.shape[0]
    for first in range(0, blocks, BATCH):
        count = min(BATCH, blocks - first)
        lanes = 8 * count
        xt = np.empty((32, lanes), np.float32)
        found = np.empty((32, lanes), np.uint8)  # the search's levels
        levels = np.empty((32, lanes), np.uint8)
        scales = np.empty(lanes, np.float32)
        mins = np.empty(lanes, np.float32)
        ls = np.empty((8, count), np.int32)
        lm = np.empty((8, count), np.int32)
        d_block = np.empty(count, np.float32)
        m_block = np.empty(count, np.float32)
        step = np.empty(lanes, np.float32)
        offset = np.empty(lanes, np.float32)
        if with_imatrix:
            w = _batch_weights(x, qw, first, count, blocks_per_row, Int(32), Int(2), Flag(False), xt)
            sw = np.empty(lanes, np.float32)
            lane_sums(w, sw)
            qkx_quants(xt, w, nmax, _IMPL_RMIN, _IMPL_RDELTA, Int(36), Flag(False), Flag(False), scales, mins, found)
            qs = np.empty((8, count), np.uint8)
            qm = np.empty((8, count), np.uint8)
            qp_quants(scales.reshape(8, count), sw.reshape(8, count), Int(63), d_block, qs)
            qp_quants(mins.reshape(8, count), sw.reshape(8, count), Int(63), m_block, qm)
            for j in range(8):
                for b in range(count):
                    ls[j, b] = min(63, np.int32(qs[j, b])) if clamp_impl else np.int32(qs[j, b])
                    lm[j, b] = min(63, np.int32(qm[j, b])) if clamp_impl else np.int32(qm[j, b])
        else:
            gather(x, first, count, Int(32), xt)
            sum_x2 = np.zeros(lanes, np.float32)
            for i in range(32):
                for g in range(lanes):
                    sum_x2[g] += xt[i, g] * xt[i, g]
            w = np.empty((32, lanes), np.float32)
            for g in range(lanes):
                sum_x2[g] = np.sqrt(sum_x2[g] / F32(32))  # av_x
            for i in range(32):
                for g in range(lanes):
                    w[i, g] = sum_x2[g] + np.abs(xt[i, g])
            qkx_quants(xt, w, nmax, rmin, rdelta, nstep, Flag(False), Flag(True), scales, mins, found)
            for b in range(count):
                max_scale, max_min = _largest_scale_and_min(scales, mins, count, 8, b)
                inv_scale = F32(63) / max_scale if max_scale > _ZERO else _ZERO
                inv_min = F32(63) / max_min if max_min > _ZERO else _ZERO
                for j in range(8):
                    ls[j, b] = min(63, nearest_int(inv_scale * scales[j * count + b]) & 0xFF)
                    lm[j, b] = min(63, nearest_int(inv_min * mins[j * count + b]) & 0xFF)
                d_block[b] = max_scale / F32(63)
                m_block[b] = max_min / F32(63)
        for b in range(count):
            blk = first + b
            _pack_k4_scales(out, blk, ls[:, b].copy(), lm[:, b].copy())
            d = fp16_to_fp32(put_fp16(out, blk, 0, d_block[b]))
            dmin = fp16_to_fp32(put_fp16(out, blk, 2, m_block[b]))
            for j in range(8):
                sc, m = _scale_min_k4(out, blk, j)
                step[j * count + b] = d * f32(sc)
                offset[j * count + b] = dmin * f32(m)
        _requantize(xt, step, offset, Flag(True), Int(0), nmax, Int(0), found, levels)
        for b in range(count):
            blk = first + b
            if five_bits:
                for l in range(32):
                    byte = 0
                    for t in range(8):
                        byte |= ((_level(levels, count, 32, b, 32 * t + l) >> 4) & 1) << t
                    out[blk, 16 + l] = np.uint8(byte)
                _pack_4bit(out, blk, 48, levels, count, b, 0xF)
            else:
                _pack_4bit(out, blk, 16, levels, count, b, 0xFF)


@kernel
def q4_k(x, qw, blocks_per_row, out):
    """Q4_K of ``x[blocks, 256]``: ``quantize_row_q4_K_ref``, or ``_impl`` when ``qw`` is not empty."""
    _k4(x, qw, blocks_per_row, out, qw.size > 0, Int(15), F32(-1.0), F32(0.1), Int(20), Flag(False), Flag(False))


@kernel
def q5_k(x, qw, blocks_per_row, out):
    """Q5_K of ``x[blocks, 256]``: ``quantize_row_q5_K_ref``, or ``_impl`` when ``qw`` is not empty."""
    _k4(x, qw, blocks_per_row, out, qw.size > 0, Int(31), F32(-0.5), F32(0.1), Int(15), Flag(True), Flag(True))


# ---- Q6_K --------------------------------------------------------------------------------------

@helper
def _q6_k(x, qw, blocks_per_row, out, with_imatrix):
    blocks = x.shape[0]
    for first in range(0, blocks, BATCH):
        count = min(BATCH, blocks - first)
        lanes = 16 * count
        xt = np.empty((16, lanes), np.float32)
        found = np.empty((16, lanes), np.uint8)  # the search's levels
        levels = np.empty((16, lanes), np.uint8)
        scales = np.empty(lanes, np.float32)
        step = np.empty(lanes, np.float32)
        if with_imatrix:
            w = _batch_weights(x, qw, first, count, blocks_per_row, Int(16), Int(0), Flag(True), xt)
        else:
            gather(x, first, count, Int(16), xt)
            w = np.empty((16, lanes), np.float32)
            for i in range(16):
                for g in range(lanes):
                    w[i, g] = xt[i, g] * xt[i, g]
        qx_quants(xt, w, Int(32), scales, found)
        signed_max = np.empty(count, np.float32)
        amax = np.empty(count, np.float32)
        first_abs_max(scales.reshape(16, count), signed_max, amax)
        for b in range(count):
            blk = first + b
            if amax[b] < GROUP_MAX_EPS:
                for k in range(210):
                    out[blk, k] = 0
                for j in range(16):
                    step[j * count + b] = _ZERO
                continue
            iscale = F32(-128) / signed_max[b]
            d = fp16_to_fp32(put_fp16(out, blk, 208, F32(1) / iscale))
            for j in range(16):
                g = j * count + b
                sc = np.int8(min(127, nearest_int(iscale * scales[g])))
                out[blk, 192 + j] = np.uint8(np.int32(sc) & 0xFF)
                step[g] = d * f32(sc)
        _requantize(xt, step, step, Flag(False), Int(-32), Int(31), Int(32), found, levels)
        for b in range(count):
            blk = first + b
            if amax[b] < GROUP_MAX_EPS:
                continue
            for h in range(2):
                for l in range(32):
                    v = 128 * h + l
                    q1 = _level(levels, count, 16, b, v)
                    q2 = _level(levels, count, 16, b, v + 32)
                    q3 = _level(levels, count, 16, b, v + 64)
                    q4 = _level(levels, count, 16, b, v + 96)
                    out[blk, 64 * h + l] = np.uint8(((q1 & 0xF) | ((q3 & 0xF) << 4)) & 0xFF)
                    out[blk, 64 * h + l + 32] = np.uint8(((q2 & 0xF) | ((q4 & 0xF) << 4)) & 0xFF)
                    out[blk, 128 + 32 * h + l] = np.uint8(((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4)
                                                           | ((q4 >> 4) << 6)) & 0xFF)


@kernel
def q6_k(x, qw, blocks_per_row, out):
    """Q6_K of ``x[blocks, 256]``: ``quantize_row_q6_K_ref``, or ``_impl`` when ``qw`` is not empty."""
    _q6_k(x, qw, blocks_per_row, out, qw.size > 0)
