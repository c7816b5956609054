"""F16 GGUF inputs for quantizer tests, and a byte-level comparison of two GGUF files.

* :func:`write_dequantized_f16` turns the real SmolLM2 Q4_1 GGUF into an F16 GGUF with all
  its metadata (gguf-py dequantizes Q4_1/Q8_0 exactly), i.e. real weights in the form
  llama-quantize takes as input.
* :func:`write_tiny_llama` writes a small random llama-architecture F16 GGUF with chosen
  dimensions — row widths that are not multiples of 256 (k-quant fallbacks) or of 32
  (F16 fallback), tied or separate output head, grouped-query attention, 8 experts.
* :func:`describe_differences` compares our output with llama.cpp's: tensor order, types,
  shapes and bytes, metadata, then the whole file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
from gguf import GGMLQuantizationType as T, GGUFReader, GGUFValueType, GGUFWriter
from gguf.quants import dequantize

from quantize.encode import encode_rows

_SYNTHESIZED = {"GGUF.version", "GGUF.tensor_count", "GGUF.kv_count", "general.architecture"}


def write_dequantized_f16(src: Path, dst: Path, matrix_type: str = "f16") -> Path:
    """``src`` (any type gguf-py can dequantize) → ``dst`` with 2-D+ tensors in F16 (or F32
    with ``matrix_type="f32"``), 1-D in F32."""
    reader = GGUFReader(src)
    arch = str(reader.get_field("general.architecture").contents())
    tmp = dst.with_suffix(".part")
    writer = GGUFWriter(tmp, arch)
    for field in reader.fields.values():
        if field.name in _SYNTHESIZED:
            continue
        value = field.contents()
        if field.name == "general.file_type":
            value = 1 if matrix_type == "f16" else 0  # LLAMA_FTYPE_MOSTLY_F16 / ALL_F32
        sub = field.types[-1] if field.types[0] == GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, value, field.types[0], sub)
    for t in reader.tensors:
        shape = tuple(int(d) for d in reversed(t.shape.tolist()))
        values = dequantize(t.data, t.tensor_type).reshape(shape).astype(np.float32)
        wide = values.astype(np.float16) if matrix_type == "f16" else values
        writer.add_tensor(t.name, wide if len(shape) > 1 else values)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    tmp.replace(dst)
    return dst


@dataclass(frozen=True)
class TinyLlama:
    """Dimensions of a synthetic llama-architecture model."""

    n_layer: int = 10
    n_embd: int = 256
    n_head: int = 8
    n_head_kv: int = 2
    n_ff: int = 320
    n_vocab: int = 320
    tied: bool = True
    n_expert: int = 0
    seed: int = 0
    #: How the 2-D weights are stored: "f16", "f32" or "bf16" (1-D tensors are always F32).
    dtype: str = "f16"


def write_tiny_llama(path: Path, cfg: TinyLlama) -> Path:
    """Write ``cfg`` as an F16 GGUF with random weights and a character-level vocabulary."""
    rng = np.random.default_rng(cfg.seed)
    w = GGUFWriter(path, "llama")
    w.add_name("tiny-llama")
    w.add_uint32("llama.block_count", cfg.n_layer)
    w.add_uint32("llama.context_length", 256)
    w.add_uint32("llama.embedding_length", cfg.n_embd)
    w.add_uint32("llama.feed_forward_length", cfg.n_ff)
    w.add_uint32("llama.attention.head_count", cfg.n_head)
    w.add_uint32("llama.attention.head_count_kv", cfg.n_head_kv)
    w.add_uint32("llama.rope.dimension_count", cfg.n_embd // cfg.n_head)
    w.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)
    w.add_uint32("llama.vocab_size", cfg.n_vocab)
    if cfg.n_expert:
        w.add_uint32("llama.expert_count", cfg.n_expert)
        w.add_uint32("llama.expert_used_count", 2)
    w.add_file_type({"f32": 0, "f16": 1, "bf16": 32}[cfg.dtype])
    w.add_string("tokenizer.ggml.model", "llama")
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(256)]
    tokens += [f"▁t{i}" for i in range(cfg.n_vocab - len(tokens))]
    w.add_array("tokenizer.ggml.tokens", tokens[: cfg.n_vocab])
    w.add_array("tokenizer.ggml.scores", [float(-i) for i in range(cfg.n_vocab)])
    w.add_array("tokenizer.ggml.token_type", [2, 3, 3] + [6] * 256 + [1] * (cfg.n_vocab - 259))
    w.add_uint32("tokenizer.ggml.bos_token_id", 1)
    w.add_uint32("tokenizer.ggml.eos_token_id", 2)

    def weight(*shape: int) -> np.ndarray:
        # heavier tails than a plain normal, like real weights, so block scales vary
        values = (rng.standard_t(5, size=shape) * 0.05).astype(np.float32)
        if cfg.dtype == "f32":
            return values
        if cfg.dtype == "bf16":
            return encode_rows(values.reshape(-1, shape[-1]), T.BF16).view(np.uint16).reshape(shape)
        return values.astype(np.float16)

    def add(name: str, values: np.ndarray) -> None:
        w.add_tensor(name, values, raw_dtype=T.BF16 if values.dtype == np.uint16 else None)

    def norm(n: int) -> np.ndarray:
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    head_dim = cfg.n_embd // cfg.n_head
    add("token_embd.weight", weight(cfg.n_vocab, cfg.n_embd))
    add("output_norm.weight", norm(cfg.n_embd))
    if not cfg.tied:
        add("output.weight", weight(cfg.n_vocab, cfg.n_embd))
    for i in range(cfg.n_layer):
        p = f"blk.{i}."
        add(p + "attn_norm.weight", norm(cfg.n_embd))
        add(p + "attn_q.weight", weight(cfg.n_embd, cfg.n_embd))
        add(p + "attn_k.weight", weight(cfg.n_head_kv * head_dim, cfg.n_embd))
        add(p + "attn_v.weight", weight(cfg.n_head_kv * head_dim, cfg.n_embd))
        add(p + "attn_output.weight", weight(cfg.n_embd, cfg.n_embd))
        add(p + "ffn_norm.weight", norm(cfg.n_embd))
        if cfg.n_expert:
            add(p + "ffn_gate_inp.weight", (rng.standard_normal((cfg.n_expert, cfg.n_embd)) * 0.05).astype(np.float32))
            add(p + "ffn_gate_exps.weight", weight(cfg.n_expert, cfg.n_ff, cfg.n_embd))
            add(p + "ffn_up_exps.weight", weight(cfg.n_expert, cfg.n_ff, cfg.n_embd))
            add(p + "ffn_down_exps.weight", weight(cfg.n_expert, cfg.n_embd, cfg.n_ff))
        else:
            add(p + "ffn_gate.weight", weight(cfg.n_ff, cfg.n_embd))
            add(p + "ffn_up.weight", weight(cfg.n_ff, cfg.n_embd))
            add(p + "ffn_down.weight", weight(cfg.n_embd, cfg.n_ff))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def tensor_types(path: Path) -> dict[str, T]:
    """Tensor name → type, in file order."""
    return {t.name: T(t.tensor_type) for t in GGUFReader(path).tensors}


def describe_differences(ours: Path, theirs: Path) -> Optional[str]:
    """``None`` when the files are byte-identical, else what differs first (for assertions)."""
    if _same_bytes(ours, theirs):
        return None
    a, b = GGUFReader(ours), GGUFReader(theirs)
    order_a, order_b = [t.name for t in a.tensors], [t.name for t in b.tensors]
    if order_a != order_b:
        return f"tensor order differs: {order_a[:5]}... vs {order_b[:5]}..."
    problems = []
    for ta, tb in zip(a.tensors, b.tensors):
        if ta.tensor_type != tb.tensor_type or list(ta.shape) != list(tb.shape):
            problems.append(f"{ta.name}: ours {T(ta.tensor_type).name}{list(ta.shape)}, "
                            f"llama.cpp {T(tb.tensor_type).name}{list(tb.shape)}")
        elif not np.array_equal(np.asarray(ta.data).view(np.uint8), np.asarray(tb.data).view(np.uint8)):
            problems.append(f"{ta.name} ({T(ta.tensor_type).name}): bytes differ")
    if problems:
        return f"{len(problems)} tensors differ: " + "; ".join(problems[:6])
    kv_a = [(f.name, f.types, f.contents()) for f in a.fields.values()]
    kv_b = [(f.name, f.types, f.contents()) for f in b.fields.values()]
    if kv_a != kv_b:
        diff = [x for x, y in zip(kv_a, kv_b) if x != y][:3] or (len(kv_a), len(kv_b))
        return f"metadata differs: {diff}"
    return "tensors and metadata agree but the files' bytes differ (layout/padding)"


def _same_bytes(a: Path, b: Path, chunk: int = 1 << 24) -> bool:
    if a.stat().st_size != b.stat().st_size:
        return False
    with open(a, "rb") as fa, open(b, "rb") as fb:
        while True:
            x, y = fa.read(chunk), fb.read(chunk)
            if x != y:
                return False
            if not x:
                return True
