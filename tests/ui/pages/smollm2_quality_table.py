"""SmolLM2's measured quality table, as stored reports the Quantize page's chart and table show.

The figures of ``tests/benchmarks/README.md`` ("What each quant type costs in quality",
``bench_quality_types.py``: SmolLM2-135M-Instruct widened to F16, every type with and
without an importance matrix, 16 chunks of 256 tokens): 53 files, most of them between 78
and 90 MiB. The chart's label tests and screenshots draw these, the crowded case the
chart has to stay readable in, without the two hours of measuring.
"""

from __future__ import annotations

from pathlib import Path

from app.core.quality_checks import QualityRow

#: The source's perplexity on the measuring text (Q8_0's 9.272 is +0.64 %).
BASE_PPL = 9.213
#: (type, with an imatrix, size MiB, bits/weight, PPL, mean KLD, its uncertainty, same top %)
TABLE = [
    ("IQ1_S", True, 78.5, 4.79, 36.131, 1.25471, 0.02249, 45.96),
    ("TQ1_0", False, 78.6, 4.79, 1188610.282, 11.21801, 0.12059, 1.82),
    ("TQ1_0", True, 78.6, 4.79, 853149.935, 11.00454, 0.12866, 1.92),
    ("IQ1_M", True, 79.1, 4.82, 25.141, 0.85057, 0.01939, 55.41),
    ("TQ2_0", False, 79.8, 4.87, 1188610.282, 11.21801, 0.12059, 1.82),
    ("TQ2_0", True, 79.8, 4.87, 853149.935, 11.00454, 0.12866, 1.92),
    ("IQ2_XXS", True, 79.9, 4.88, 18.768, 0.58455, 0.01386, 60.24),
    ("IQ2_XS", True, 80.7, 4.92, 16.989, 0.46286, 0.01039, 65.35),
    ("IQ2_S", True, 80.9, 4.94, 15.160, 0.39167, 0.00904, 68.06),
    ("IQ2_M", True, 81.6, 4.98, 13.815, 0.32769, 0.00768, 70.08),
    ("Q2_K_S", True, 82.1, 5.02, 14.506, 0.38033, 0.00957, 68.01),
    ("IQ3_XXS", True, 82.9, 5.07, 12.113, 0.21572, 0.00524, 76.28),
    ("IQ3_S", False, 84.1, 5.14, 25.178, 0.87014, 0.01969, 54.33),
    ("IQ3_XS", False, 84.1, 5.14, 25.178, 0.87014, 0.01969, 54.33),
    ("Q2_K", False, 84.1, 5.14, 14.979, 0.44897, 0.00924, 64.27),
    ("Q3_K_S", False, 84.1, 5.14, 14.979, 0.44897, 0.00924, 64.27),
    ("IQ3_S", True, 84.1, 5.14, 11.231, 0.15697, 0.00417, 78.89),
    ("IQ3_XS", True, 84.1, 5.14, 11.231, 0.15697, 0.00417, 78.89),
    ("Q2_K", True, 84.1, 5.14, 12.746, 0.29493, 0.00713, 71.11),
    ("Q3_K_S", True, 84.1, 5.14, 12.746, 0.29493, 0.00713, 71.11),
    ("IQ3_XXS", False, 84.5, 5.16, 13.701, 0.33268, 0.00647, 67.57),
    ("IQ3_M", False, 86.0, 5.26, 20.796, 0.71894, 0.01679, 57.92),
    ("IQ3_M", True, 86.0, 5.26, 10.758, 0.13481, 0.00359, 80.46),
    ("IQ4_XS", True, 86.7, 5.30, 10.392, 0.09975, 0.00259, 83.22),
    ("IQ4_XS", False, 87.1, 5.32, 12.337, 0.21201, 0.00461, 73.97),
    ("Q4_0", False, 87.5, 5.35, 12.991, 0.30128, 0.00708, 70.57),
    ("IQ4_NL", True, 87.5, 5.35, 10.319, 0.09707, 0.00262, 84.01),
    ("Q4_0", True, 87.6, 5.36, 11.328, 0.18134, 0.00437, 77.51),
    ("IQ4_NL", False, 87.8, 5.37, 12.277, 0.20674, 0.00450, 73.92),
    ("Q3_K_M", False, 89.2, 5.46, 11.033, 0.14518, 0.00416, 77.61),
    ("Q3_K_M", True, 89.2, 5.46, 10.175, 0.08992, 0.00225, 83.32),
    ("Q3_K_L", False, 93.0, 5.69, 11.273, 0.16582, 0.00618, 77.95),
    ("Q3_K_L", True, 93.0, 5.69, 10.008, 0.06926, 0.00178, 84.45),
    ("Q4_1", False, 93.8, 5.74, 9.192, 0.00301, 0.00007, 97.10),
    ("Q4_1", True, 93.8, 5.74, 9.163, 0.00299, 0.00007, 97.10),
    ("Q4_K_S", False, 97.3, 5.96, 10.009, 0.06848, 0.00162, 85.63),
    ("Q4_K_S", True, 97.3, 5.96, 9.571, 0.04073, 0.00103, 88.78),
    ("Q5_0", False, 100.1, 6.14, 10.158, 0.08110, 0.00202, 84.50),
    ("Q5_0", True, 100.3, 6.15, 9.655, 0.05343, 0.00146, 87.20),
    ("Q4_K_M", False, 100.6, 6.17, 9.819, 0.05935, 0.00237, 87.25),
    ("Q4_K_M", True, 100.6, 6.17, 9.562, 0.03597, 0.00100, 90.21),
    ("Q5_K_S", False, 104.9, 6.43, 10.019, 0.08899, 0.00211, 82.48),
    ("Q5_K_S", True, 104.9, 6.43, 9.302, 0.00664, 0.00020, 95.32),
    ("Q5_1", False, 106.5, 6.53, 10.404, 0.12351, 0.00307, 80.07),
    ("Q5_1", True, 106.5, 6.53, 9.201, 0.00299, 0.00007, 96.90),
    ("Q5_K_M", False, 106.9, 6.56, 9.847, 0.08295, 0.00204, 82.04),
    ("Q5_K_M", True, 106.9, 6.56, 9.246, 0.00731, 0.00022, 95.52),
    ("Q6_K", False, 132.0, 8.12, 9.287, 0.00976, 0.00029, 94.05),
    ("Q6_K", True, 132.0, 8.12, 9.271, 0.00782, 0.00024, 94.49),
    ("MXFP4_MOE", False, 138.1, 8.51, 9.272, 0.00428, 0.00011, 95.77),
    ("Q8_0", False, 138.1, 8.51, 9.272, 0.00428, 0.00011, 95.77),
    ("MXFP4_MOE", True, 138.1, 8.51, 9.272, 0.00428, 0.00011, 95.77),
    ("Q8_0", True, 138.1, 8.51, 9.272, 0.00428, 0.00011, 95.77),
]


def smollm2_rows(folder: Path = Path("/models")) -> list[QualityRow]:
    """The table as the page's rows (files named as ``bench_quality_types.py`` names them)."""
    rows = []
    for name, imatrix, mib, bits, ppl, kld, spread, same_top in TABLE:
        path = folder / (f"SmolLM2-135M-{name}.gguf" if imatrix else f"SmolLM2-135M-{name}-plain.gguf")
        stats = {"mean_kld": kld, "mean_kld_uncertainty": spread, "same_top_percent": same_top,
                 "same_top_percent_uncertainty": 0.5, "ppl": ppl, "ppl_uncertainty": 0.1, "base_ppl": BASE_PPL,
                 "base_ppl_uncertainty": 0.1}
        settings = {"text": "measuring-half.txt", "n_ctx": 256, "chunks": 16}
        rows.append(QualityRow(path, name, int(mib * 2**20), bits, "calibration-half.imatrix.gguf" if imatrix else "",
                               stats, settings))
    return rows
