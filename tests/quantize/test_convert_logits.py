"""Converted GGUFs compute what transformers computes on the same checkpoint.

For a tiny checkpoint of every supported architecture, llama.cpp (llama-cpp-python, in a
child process) evaluates our GGUF on a prompt and its logits for every position are
compared with transformers' float32 logits.

Tolerances, from what each path rounds:

- F32: nothing is rounded by the conversion; llama.cpp and torch differ only in float32
  summation order (measured ~2e-6 on logits of magnitude ~2.5), so 1e-4. llama.cpp's KV
  cache is made F32 for this (its default F16 cache would round K and V). Gemma's MLP
  uses GELU, which llama.cpp's CPU kernel reads from an F16 table (ggml-cpu/vec.h,
  GGML_GELU_FP16); the reference applies the same rounding, and the bound becomes one F16
  unit (2^-11) of the logit range, for table entries rounded on the other side.
- F16/BF16: the reference's matrices are rounded to the same type first, so weights are
  equal; the remaining gap is llama.cpp rounding *activations* to the weight type before
  each matrix product (the vec_dot type of F16 is F16, of BF16 is BF16): one rounding unit
  (2^-11 or 2^-8, relative) per product. A token's logits pass through about four
  products per layer; we allow 8 units of the logit range, measured use is 1.5–3.
"""

from __future__ import annotations

import numpy as np
import pytest

from quantize.convert import convert
from tests.factory.checkpoints import write_tiny_checkpoint
from tests.quantize.convert_oracles import hf_logits, hf_tokenizer, llama_cpp_logits

pytest.importorskip("torch")
pytest.importorskip("transformers")

ARCHS = ["llama", "llama3", "smollm", "tinyllama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3", "phi3"]
PROMPT = "Hello world! def f(x):\n    return x * 2  # 123 4567 你好 Grüße 😀"
UNIT = {"f16": 2.0 ** -11, "bf16": 2.0 ** -8}
GELU_FAMILIES = ("gemma2", "gemma3")


def _prompt_ids(model_dir) -> list[int]:
    ids = hf_tokenizer(model_dir)(PROMPT, add_special_tokens=True)["input_ids"]
    assert len(ids) >= 12
    return ids


@pytest.mark.parametrize("arch", ARCHS)
def test_f32_logits_match_transformers(tmp_path, arch):
    ck = write_tiny_checkpoint(tmp_path / arch, arch=arch)
    ids = _prompt_ids(ck.path)
    gguf = convert(ck.path, tmp_path / "out-f32.gguf", "f32")
    ours = llama_cpp_logits(gguf, ids)
    gelu = arch.startswith(GELU_FAMILIES)
    reference = hf_logits(ck.path, ids, ggml_gelu=gelu)
    assert ours.shape == reference.shape == (len(ids), ck.config["vocab_size"])
    diff = float(np.abs(ours - reference).max())
    scale = float(np.abs(reference).max())
    tolerance = 2.0 ** -11 * scale if gelu else 1e-4
    print(f"{arch} F32: max |llama.cpp - transformers| = {diff:.3g} (logits up to {scale:.3g}, "
          f"tolerance {tolerance:.3g})")
    assert diff <= tolerance
    # The prompt's next-token choice is the same everywhere, not only close on average.
    assert (ours.argmax(-1) == reference.argmax(-1)).all()


@pytest.mark.parametrize("outtype", ["f16", "bf16"])
@pytest.mark.parametrize("arch", ["llama", "qwen2", "gemma2", "phi3"])
def test_half_precision_logits_within_rounding_bound(tmp_path, arch, outtype):
    ck = write_tiny_checkpoint(tmp_path / arch, arch=arch)
    ids = _prompt_ids(ck.path)
    gguf = convert(ck.path, tmp_path / f"out-{outtype}.gguf", outtype)
    ours = llama_cpp_logits(gguf, ids)
    dtype = {"f16": "float16", "bf16": "bfloat16"}[outtype]
    gelu = arch.startswith(GELU_FAMILIES)
    rounded = hf_logits(ck.path, ids, round_weights_to=dtype, ggml_gelu=gelu)
    exact = hf_logits(ck.path, ids, ggml_gelu=gelu)
    scale = float(np.abs(rounded).max())
    diff = float(np.abs(ours - rounded).max())
    diff_exact = float(np.abs(ours - exact).max())
    tolerance = 8 * UNIT[outtype] * scale
    print(f"{arch} {outtype.upper()}: max diff {diff:.3g} vs transformers with {dtype} weights, "
          f"{diff_exact:.3g} vs float32 weights (logits up to {scale:.3g}, tolerance {tolerance:.3g})")
    assert diff <= tolerance
    assert diff_exact <= 2 * tolerance


def test_llama3_rope_scaling_is_applied(tmp_path):
    """The rope_freqs tensor matters: without it llama.cpp's logits leave transformers'."""
    from gguf import GGUFReader

    ck = write_tiny_checkpoint(tmp_path / "m", arch="llama3")
    gguf = convert(ck.path, tmp_path / "out.gguf", "f32")
    freqs = next(t for t in GGUFReader(gguf).tensors if t.name == "rope_freqs.weight")
    factors = np.asarray(freqs.data)
    assert factors.shape == (ck.config["head_dim"] // 2,)
    assert factors[0] == 1.0 and factors[-1] == 8.0  # fast dims kept, slow dims scaled by factor
    ck_plain = write_tiny_checkpoint(tmp_path / "plain", arch="llama3",
                                     config_overrides={"rope_scaling": None})
    ids = _prompt_ids(ck.path)
    scaled = hf_logits(ck.path, ids)
    plain = hf_logits(ck_plain.path, ids)
    assert np.abs(scaled - plain).max() > 1e-3  # the scaling changes this model's outputs
