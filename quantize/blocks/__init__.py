"""numpy block quantizers that write exactly llama.cpp's bytes.

Importing this package registers an encoder in :data:`quantize.encode.ENCODERS` for
Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 (:mod:`.legacy`) and Q2_K, Q3_K, Q4_K, Q5_K, Q6_K
(:mod:`.kquants`), each with and without importance weights (imatrix).

Bit-exactness rests on emulating ggml-quants.c's float32 arithmetic step by step
(:mod:`.float_ops`) and its scale searches (:mod:`.searches`); the oracle is libggml's
own ``ggml_quantize_chunk`` (:mod:`quantize.reference_ggml`), checked by
``tests/quantize/test_blocks_bitexact.py``. Blocks holding NaN are not reproduced: C's
comparisons with NaN depend on where it sits in the block. A NaN weight means a broken
model; llama.cpp itself refuses the tensor when the NaN reaches a block's scale.
"""

from quantize.blocks import kquants, legacy  # noqa: F401  (imported to register encoders)
