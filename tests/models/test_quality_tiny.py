"""The importance matrix of a tiny mixture-of-experts model (written by the test factory):
the per-expert path (``MUL_MAT_ID``) through the real llama.cpp."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGUFReader

from models.quality.runner import MeasureOptions, generate_imatrix
from models.quality.text import builtin_text
from tests.quantize.model_files import TinyLlama, write_tiny_llama

pytestmark = pytest.mark.slow


def test_experts_are_counted_per_routed_token(tmp_path):
    model = write_tiny_llama(tmp_path / "tiny-moe.gguf", TinyLlama(n_layer=2, n_expert=8))
    result = generate_imatrix(model, builtin_text(), tmp_path / "moe.imatrix.gguf",
                              MeasureOptions(n_ctx=32, n_batch=128, chunks=4, threads=2))
    tensors = {t.name: np.array(t.data) for t in GGUFReader(result.path).tensors}
    tokens = 4 * 32
    for layer in range(2):
        counts = [tensors[f"blk.{layer}.ffn_{m}_exps.weight.counts"].ravel() for m in ("gate", "up", "down")]
        assert counts[0].shape == (8,)
        assert counts[0].sum() == 2 * tokens  # two experts per token
        assert all(np.array_equal(counts[0], c) for c in counts[1:])  # one routing per layer
        sums = tensors[f"blk.{layer}.ffn_up_exps.weight.in_sum2"]
        assert sums.shape == (8, 256)
        # an expert no token was routed to has no sums; every routed one has some
        assert np.array_equal((sums > 0).any(axis=1), counts[0] > 0)
        assert tensors[f"blk.{layer}.attn_q.weight.counts"].ravel().tolist() == [tokens]
    assert result.chunk_count == 4
