"""A file's stored quality report in words: the Library's Quality column and the Chat page's model picker.

The report (:class:`models.library.QualityRecord`) comes from the Quantize page's "Check
quality" or ``quantdesk eval``; a file never measured has none.
"""

from __future__ import annotations

from pathlib import Path


def quality_text(record) -> str:
    """``"KLD 0.0123"``, or ``"–"`` for a file never measured."""
    return f"KLD {record.stats['mean_kld']:.4f}" if record is not None else "–"


def quality_tooltip(record) -> str:
    """The stored report of a file, in a few lines."""
    if record is None:
        return "Not measured: quantize it on the Quantize page and use Check quality, or run quantdesk eval."
    s = record.stats
    return (f"Measured against {Path(record.base).name}\n"
            f"Mean KLD {s['mean_kld']:.5f} ± {s['mean_kld_uncertainty']:.5f}\n"
            f"Same top token {s['same_top_percent']:.2f} %\n"
            f"PPL {s['ppl']:.4f} (source {s['base_ppl']:.4f})\n"
            f"{record.settings.get('tokens', '?')} tokens of {Path(str(record.settings.get('text', '?'))).name}")
