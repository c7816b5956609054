"""The file types QuantDesk offers, exactly as ``llama-quantize`` names and numbers them.

A *file type* (``Q4_K_M``) is a recipe: a default tensor type (``Q4_K``) plus the per-tensor
rules of :mod:`quantize.type_rules` that give some tensors more bits. Its number is
llama.cpp's ``enum llama_ftype`` value, which the output file records in
``general.file_type``; programs that show "Q4_K_M" for a GGUF read it from there.

Facts carried over from llama.cpp's ``include/llama.h`` (the numbers),
``tools/quantize/quantize.cpp`` (names, aliases, descriptions) and ``src/llama-quant.cpp``
(``llama_ftype_get_default_type``).
"""

from __future__ import annotations

from dataclasses import dataclass

from quantize.ggml_types import GGMLQuantizationType as T

from models.foundation.errors import QuantDeskError

#: ``GGML_QNT_VERSION`` of ggml.h, written as ``general.quantization_version``.
QUANTIZATION_VERSION = 2


_FLOAT_TYPES = (T.F32, T.F16, T.BF16, T.F64)

#: The file types whose plans hold a type ``tensor_requires_imatrix`` names (see
#: :data:`quantize.plan.IMATRIX_REQUIRED_TYPES`) for the weights of every layer.
IMATRIX_FILE_TYPES = frozenset({"Q2_K_S", "IQ3_XXS", "IQ3_XS", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ2_M",
                                "IQ1_S", "IQ1_M"})


@dataclass(frozen=True)
class FileType:
    """One quantization recipe as ``llama-quantize`` offers it.

    Attributes:
        name: The name users type and see, e.g. ``Q4_K_M``.
        ftype: llama.cpp's ``llama_ftype`` number, written as ``general.file_type``.
        default_type: The tensor type most weight tensors get.
        description: llama-quantize's one-line description (size and quality on Llama-3-8B).
    """

    name: str
    ftype: int
    default_type: T
    description: str

    @property
    def needs_imatrix(self) -> bool:
        """Whether llama-quantize refuses this file type without an importance matrix
        (its rules give some layer weights a type that comes out as noise without one; a
        model whose rows are not multiples of 256 may escape it through the fall-backs,
        which the plan's ``needs_imatrix`` says exactly)."""
        return self.name in IMATRIX_FILE_TYPES

    @property
    def is_quantized(self) -> bool:
        """Whether the default type is a block-quantized one (not F16/BF16/F32)."""
        return is_quantized_type(self.default_type)


_ALL = [
    FileType("Q4_0", 2, T.Q4_0, " 4.34G, +0.4685 ppl @ Llama-3-8B"),
    FileType("Q4_1", 3, T.Q4_1, " 4.78G, +0.4511 ppl @ Llama-3-8B"),
    FileType("MXFP4_MOE", 38, T.MXFP4, " MXFP4 MoE"),
    FileType("Q5_0", 8, T.Q5_0, " 5.21G, +0.1316 ppl @ Llama-3-8B"),
    FileType("Q5_1", 9, T.Q5_1, " 5.65G, +0.1062 ppl @ Llama-3-8B"),
    FileType("IQ2_XXS", 19, T.IQ2_XXS, " 2.06 bpw quantization (needs an importance matrix)"),
    FileType("IQ2_XS", 20, T.IQ2_XS, " 2.31 bpw quantization (needs an importance matrix)"),
    FileType("IQ2_S", 28, T.IQ2_XS, " 2.5  bpw quantization (needs an importance matrix)"),
    FileType("IQ2_M", 29, T.IQ2_S, " 2.7  bpw quantization (needs an importance matrix)"),
    FileType("IQ1_S", 24, T.IQ1_S, " 1.56 bpw quantization (needs an importance matrix)"),
    FileType("IQ1_M", 31, T.IQ1_M, " 1.75 bpw quantization (needs an importance matrix)"),
    FileType("TQ1_0", 36, T.TQ1_0, " 1.69 bpw ternarization"),
    FileType("TQ2_0", 37, T.TQ2_0, " 2.06 bpw ternarization"),
    FileType("Q2_K", 10, T.Q2_K, " 2.96G, +3.5199 ppl @ Llama-3-8B"),
    FileType("Q2_K_S", 21, T.Q2_K, " 2.96G, +3.1836 ppl @ Llama-3-8B (needs an importance matrix)"),
    FileType("IQ3_XXS", 23, T.IQ3_XXS, " 3.06 bpw quantization (needs an importance matrix)"),
    FileType("IQ3_S", 26, T.IQ3_S, " 3.44 bpw quantization"),
    FileType("IQ3_M", 27, T.IQ3_S, " 3.66 bpw quantization mix"),
    FileType("IQ3_XS", 22, T.IQ3_S, " 3.3 bpw quantization (needs an importance matrix)"),
    FileType("Q3_K_S", 11, T.Q3_K, " 3.41G, +1.6321 ppl @ Llama-3-8B"),
    FileType("Q3_K_M", 12, T.Q3_K, " 3.74G, +0.6569 ppl @ Llama-3-8B"),
    FileType("Q3_K_L", 13, T.Q3_K, " 4.03G, +0.5562 ppl @ Llama-3-8B"),
    FileType("IQ4_NL", 25, T.IQ4_NL, " 4.50 bpw non-linear quantization"),
    FileType("IQ4_XS", 30, T.IQ4_XS, " 4.25 bpw non-linear quantization"),
    FileType("Q4_K_S", 14, T.Q4_K, " 4.37G, +0.2689 ppl @ Llama-3-8B"),
    FileType("Q4_K_M", 15, T.Q4_K, " 4.58G, +0.1754 ppl @ Llama-3-8B"),
    FileType("Q5_K_S", 16, T.Q5_K, " 5.21G, +0.1049 ppl @ Llama-3-8B"),
    FileType("Q5_K_M", 17, T.Q5_K, " 5.33G, +0.0569 ppl @ Llama-3-8B"),
    FileType("Q6_K", 18, T.Q6_K, " 6.14G, +0.0217 ppl @ Llama-3-8B"),
    FileType("Q8_0", 7, T.Q8_0, " 7.96G, +0.0026 ppl @ Llama-3-8B"),
    FileType("F16", 1, T.F16, "14.00G, +0.0020 ppl @ Mistral-7B"),
    FileType("BF16", 32, T.BF16, "14.00G, -0.0050 ppl @ Mistral-7B"),
    FileType("F32", 0, T.F32, "26.00G              @ 7B"),
]

#: Tensor types QuantDesk's block quantizers write (with F32, F16 and BF16).
WRITABLE_TYPES = frozenset({
    T.F32, T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0,
    T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K, T.IQ4_NL, T.IQ4_XS, T.TQ1_0, T.TQ2_0, T.MXFP4,
    T.IQ3_XXS, T.IQ3_S, T.IQ2_XXS, T.IQ2_XS, T.IQ2_S, T.IQ1_S, T.IQ1_M,
})

#: Every file type QuantDesk can write (all that llama-quantize writes but Q1_0, Q2_0 and
#: COPY), by name, in llama-quantize's order. Every tensor type their rules give is
#: writable, which ``tests/quantize/test_plan.py`` checks.
FILE_TYPES: dict[str, FileType] = {ft.name: ft for ft in _ALL}

#: llama-quantize's aliases: the medium mix of a k-quant family.
ALIASES = {"Q3_K": "Q3_K_M", "Q4_K": "Q4_K_M", "Q5_K": "Q5_K_M"}

#: Tensor types a user may name for ``--output-tensor-type`` / ``--token-embedding-type``.
TENSOR_TYPES: dict[str, T] = {t.name: t for t in sorted(WRITABLE_TYPES)}


def is_quantized_type(qtype: T) -> bool:
    """``ggml_is_quantized``: true for block types, false for plain floats."""
    return qtype not in _FLOAT_TYPES


def parse_file_type(text: str) -> FileType:
    """The file type named ``text`` (case-insensitive; ``Q4_K`` means ``Q4_K_M``).

    Raises:
        QuantDeskError: no such file type; the message lists the valid names.
    """
    key = text.strip().upper()
    key = ALIASES.get(key, key)
    if key.isdigit():
        by_number = {ft.ftype: ft for ft in FILE_TYPES.values()}
        if int(key) in by_number:
            return by_number[int(key)]
    if key in FILE_TYPES:
        return FILE_TYPES[key]
    raise QuantDeskError(
        f"'{text}' is not a quantization type QuantDesk knows.",
        f"Choose one of {', '.join(FILE_TYPES)}.",
    )


def parse_tensor_type(text: str) -> T:
    """The GGML tensor type named ``text`` (case-insensitive), e.g. ``q8_0`` or ``Q6_K``.

    Raises:
        QuantDeskError: not a tensor type QuantDesk can write.
    """
    key = text.strip().upper()
    if key in TENSOR_TYPES:
        return TENSOR_TYPES[key]
    raise QuantDeskError(
        f"'{text}' is not a tensor type QuantDesk can write.",
        f"Choose one of {', '.join(TENSOR_TYPES)}.",
    )
