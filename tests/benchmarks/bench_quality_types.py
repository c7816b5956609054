"""Benchmark: what each quantization type costs SmolLM2 in quality, with and without an imatrix.

Run: ``.venv/bin/python tests/benchmarks/bench_quality_types.py [--home DIR] [--ctx 256]
[--chunks 16] [--threads 2] [--types Q2_K,IQ2_M,...]``

SmolLM2-135M-Instruct (its Q4_1 release widened to an F16 GGUF: the "source") is quantized
to every type, once with an importance matrix and once without, and each file is measured
against the source as the Quantize page's "Check quality" does
(:func:`app.core.quality_checks.check_quality`: mean KL divergence, same top token,
perplexity). QuantDesk's built-in text is cut in two at a line break: the importance
matrix is made on the first half and the measuring runs on the second, so no type is
scored on the text its imatrix was made from. A type llama.cpp refuses without an
importance matrix is listed as refused.

Everything is kept under ``--home`` (``QUANTDESK_HOME``: the models, their Library entries
and stored reports; a run with the same ``--home`` goes on where one was cut short), so ``python -m tests.ui.pages.quality_screenshots OUT HOME`` can then
show the same reports on the Quantize page. Prints a Markdown table, smallest file first.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

K_AND_LEGACY = ["Q2_K", "Q2_K_S", "Q3_K_S", "Q3_K_M", "Q3_K_L", "Q4_0", "Q4_1", "Q4_K_S", "Q4_K_M",
                "Q5_0", "Q5_1", "Q5_K_S", "Q5_K_M", "Q6_K", "Q8_0"]
NEW_TYPES = ["IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ2_M", "IQ3_XXS", "IQ3_XS", "IQ3_S",
             "IQ3_M", "IQ4_NL", "IQ4_XS", "TQ1_0", "TQ2_0", "MXFP4_MOE"]
SOURCE_NAME = "SmolLM2-135M-F16.gguf"
PLAIN_PATTERN = "{name}-{type}-plain.gguf"


def split_text(models: Path) -> tuple[Path, Path]:
    """The built-in text's two halves (cut at a line break) as files: calibration, measuring."""
    from models.quality.text import resolve_text

    data = resolve_text(None).data
    cut = data.index(b"\n", len(data) // 2) + 1
    calibration, measuring = models / "calibration-half.txt", models / "measuring-half.txt"
    calibration.write_bytes(data[:cut])
    measuring.write_bytes(data[cut:])
    return calibration, measuring


def quantize_all(source: Path, types: list[str], calibration, models: Path) -> tuple[list[Path], list[str]]:
    """Each type with the imatrix (one job), then each without (one job per type, since
    llama.cpp refuses some); returns the files and the types refused without one. Files
    already in ``models`` (an earlier run's) are kept, so a run cut short goes on."""
    from app.core.quantize_queue import DEFAULT_PATTERN, QuantizeRequest, output_path, run_quantize
    from models.foundation.errors import QuantDeskError

    outputs = [output_path(source, name, models, DEFAULT_PATTERN) for name in types]
    missing = [name for name, path in zip(types, outputs) if not path.exists()]
    if missing:
        run_quantize(QuantizeRequest(source, missing, folder=models, imatrix_from=calibration))
    refused = []
    for name in types:
        path = output_path(source, name, models, PLAIN_PATTERN)
        try:
            if not path.exists():
                run_quantize(QuantizeRequest(source, [name], folder=models, pattern=PLAIN_PATTERN))
            outputs.append(path)
        except QuantDeskError as exc:
            print(f"{name} without an imatrix: {exc.user_message}", flush=True)
            refused.append(name)
    return outputs, refused


def table(rows, refused: list[str]) -> str:
    """The Markdown table of :class:`~app.core.quality_checks.QualityRow` rows."""
    lines = ["| type | imatrix | size MiB | bits/weight | PPL | ΔPPL % | mean KLD | same top % |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r.type_name} | {'yes' if r.imatrix else 'no'} | {r.size / 2**20:.1f} | "
                     f"{r.bits_per_weight:.2f} | {r.ppl:.3f} | {r.delta_ppl_percent:+.2f} | "
                     f"{r.mean_kld:.5f} ± {float(r.stats['mean_kld_uncertainty']):.5f} | "
                     f"{r.same_top_percent:.2f} |")
    for name in refused:
        lines.append(f"| {name} | no | refused: llama.cpp's rules need an importance matrix | | | | | |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, help="QUANTDESK_HOME to keep everything in (default: a new temporary folder)")
    parser.add_argument("--ctx", type=int, default=256)
    parser.add_argument("--chunks", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--types", default=",".join(K_AND_LEGACY + NEW_TYPES))
    args = parser.parse_args()
    home = args.home or Path(tempfile.mkdtemp(prefix="quantdesk-quality-types-"))
    os.environ["QUANTDESK_HOME"] = str(home)

    from app.core.quality_checks import MeasureSettings, check_quality
    from models.foundation.jobs import Progress
    from tests.conftest import cached_models_dir, fetch_smollm2
    from tests.quantize.model_files import write_dequantized_f16

    models = home / "models"
    models.mkdir(parents=True, exist_ok=True)
    source = models / SOURCE_NAME
    if not source.exists():
        write_dequantized_f16(fetch_smollm2(cached_models_dir()), source)
    calibration_text, measuring_text = split_text(models)
    calibration = MeasureSettings(str(calibration_text), args.ctx, args.chunks, args.threads)
    measuring = MeasureSettings(str(measuring_text), args.ctx, args.chunks, args.threads)
    types = [t.strip() for t in args.types.split(",") if t.strip()]

    started = time.perf_counter()
    outputs, refused = quantize_all(source, types, calibration, models)
    print(f"quantized {len(outputs)} files in {time.perf_counter() - started:.1f} s", flush=True)

    last = [0.0]

    def report(p: Progress) -> None:
        if time.perf_counter() - last[0] > 30:
            last[0] = time.perf_counter()
            print(f"  {p.stage} {p.done}/{p.total} {p.detail or ''}", flush=True)

    started = time.perf_counter()
    rows = check_quality(outputs, source, measuring, report)
    print(f"measured in {time.perf_counter() - started:.1f} s; load {os.getloadavg()[0]:.1f}\n", flush=True)
    print(f"Source {source} ({source.stat().st_size / 2**20:.1f} MiB); imatrix on {calibration_text.name}, "
          f"measured on {measuring_text.name}, {args.chunks} chunks of {args.ctx} tokens, {args.threads} threads\n")
    print(table(rows, refused))


if __name__ == "__main__":
    main()
