"""GBNF for "an integer from lo to hi", exact to the digit, as llama.cpp's converter does,
and for decimals between whole-number bounds.

A JSON integer has no leading zeros, so the integers of one digit count ``d`` are exactly
the strings of ``d`` digits, and a range of them splits by the first differing digit:

    [123, 456]  →  "1" ([2-9][0-9] | "23"…)  |  [2-3] [0-9]{2}  |  "4" ([0-4][0-9] | "5" [0-6])

Negative numbers are ``"-"`` followed by a magnitude range. Either bound may be missing.
A decimal in ``[lo, hi]`` (whole bounds) is a whole part in ``[lo, hi - 1]`` with any
fraction, or exactly ``hi`` with a zero fraction; the negative side mirrors it.
"""

from __future__ import annotations

from typing import Optional


def _digit_class(lo: int, hi: int) -> str:
    return f'"{lo}"' if lo == hi else f"[{lo}-{hi}]"


def _same_length(lo: str, hi: str) -> str:
    """Digit strings of one length between ``lo`` and ``hi`` inclusive (lo <= hi)."""
    if not lo:
        return ""
    if lo == hi:
        return f'"{lo}"'
    if lo[0] == hi[0]:
        return f'"{lo[0]}" ({_same_length(lo[1:], hi[1:])})'
    rest = len(lo) - 1
    any_rest = f" [0-9]{{{rest}}}" if rest else ""
    if lo[1:] == "0" * rest and hi[1:] == "9" * rest:
        return _digit_class(int(lo[0]), int(hi[0])) + any_rest
    parts = [f'"{lo[0]}" ({_same_length(lo[1:], "9" * rest)})']
    if int(hi[0]) - int(lo[0]) > 1:
        parts.append(_digit_class(int(lo[0]) + 1, int(hi[0]) - 1) + any_rest)
    parts.append(f'"{hi[0]}" ({_same_length("0" * rest, hi[1:])})')
    return " | ".join(parts)


def magnitude_range(lo: int, hi: Optional[int]) -> str:
    """Non-negative integers in ``[lo, hi]`` (``hi`` None: unbounded) without leading zeros."""
    parts = []
    if lo == 0:
        parts.append('"0"')
        lo = 1
    top_len = len(str(hi)) if hi is not None else len(str(lo))
    for digits in range(len(str(lo)), top_len + 1):
        a = max(lo, 10 ** (digits - 1))
        b = 10 ** digits - 1 if hi is None else min(hi, 10 ** digits - 1)
        if a <= b:
            parts.append(f"({_same_length(str(a), str(b))})")
    if hi is None:
        parts.append(f"[1-9] [0-9]{{{top_len},}}")
    return " | ".join(parts) if parts else ""


def integer_range(lo: Optional[int], hi: Optional[int]) -> str:
    """A GBNF expression for the JSON integers ``lo <= n <= hi``; bounds may be ``None``."""
    parts = []
    if lo is None or lo < 0:
        # Negative part: magnitudes from max(1, -hi) up to -lo.
        neg_lo = 1 if hi is None or hi >= 0 else -hi
        neg_hi = None if lo is None else -lo
        if neg_hi is None or neg_lo <= neg_hi:
            parts.append(f'"-" ({magnitude_range(neg_lo, neg_hi)})')
    if hi is None or hi >= 0:
        pos_lo = 0 if lo is None or lo < 0 else lo
        if hi is None or pos_lo <= hi:
            parts.append(f"({magnitude_range(pos_lo, hi)})")
    return " | ".join(parts)


def number_range(lo: Optional[int], hi: Optional[int], fraction: str) -> str:
    """Decimals (no exponent) with ``lo <= x <= hi``; ``fraction`` names a ``"." digits`` rule."""
    zeros = '("." "0"{1,15})?'
    parts = []
    if hi is None or hi >= 0:  # non-negative side
        p_lo = 0 if lo is None or lo < 0 else lo
        if hi is None:
            parts.append(f"({magnitude_range(p_lo, None)}) {fraction}?")
        else:
            if p_lo <= hi - 1:
                parts.append(f"({magnitude_range(p_lo, hi - 1)}) {fraction}?")
            if p_lo <= hi:
                parts.append(f'"{hi}" {zeros}')
    if lo is None or lo < 0:  # negative side, by magnitude
        m_lo = -hi if hi is not None and hi < 0 else 0
        if lo is None:
            parts.append(f'"-" ({magnitude_range(max(m_lo, 1), None)}) {fraction}?')
            if m_lo == 0:
                parts.append(f'"-0" {fraction}')
        else:
            if m_lo <= -lo - 1:
                parts.append(f'"-" ({magnitude_range(m_lo, -lo - 1)}) {fraction}?')
            parts.append(f'"-{-lo}" {zeros}')
    return " | ".join(f"({p})" for p in parts)
