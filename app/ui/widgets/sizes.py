"""Byte counts in words a person reads at a glance."""

from __future__ import annotations


def human_size(n: int) -> str:
    """Bytes as MiB or GiB."""
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"
