"""Benchmark: converting a multi-GB safetensors checkpoint to GGUF — speed and peak memory.

Writes synthetic TinyLlama-shaped checkpoints (hidden 2048, GQA 32/4 heads, vocab 32000,
BF16 weights, 3 shards, real tokenizer files from the test factory) of two sizes to /tmp,
then for each:

- copies the same weight bytes with ``shutil.copyfile`` (the reference: what moving the
  bytes costs on this disk and page cache), and
- converts BF16 → F16 GGUF in a child process that reports its peak resident memory
  (``VmHWM``) next to the RSS of a child that only imported the converter.

Prints throughput in MB/s of input and as a ratio to the copy, and peak memory against
the target ``2 × largest tensor (as float32) + 300 MB``, which must hold for both sizes
(memory flat in model size). Run: ``.venv/bin/python tests/benchmarks/bench_convert.py``.
"""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

HIDDEN, INTER, HEADS, KV_HEADS, VOCAB = 2048, 5632, 32, 4, 32000
CHUNK = 64 << 20


def tensor_shapes(layers: int) -> dict[str, tuple[int, ...]]:
    hd = HIDDEN // HEADS
    shapes = {"model.embed_tokens.weight": (VOCAB, HIDDEN)}
    for i in range(layers):
        p = f"model.layers.{i}."
        shapes.update({
            p + "input_layernorm.weight": (HIDDEN,), p + "post_attention_layernorm.weight": (HIDDEN,),
            p + "self_attn.q_proj.weight": (HEADS * hd, HIDDEN), p + "self_attn.k_proj.weight": (KV_HEADS * hd, HIDDEN),
            p + "self_attn.v_proj.weight": (KV_HEADS * hd, HIDDEN), p + "self_attn.o_proj.weight": (HIDDEN, HEADS * hd),
            p + "mlp.gate_proj.weight": (INTER, HIDDEN), p + "mlp.up_proj.weight": (INTER, HIDDEN),
            p + "mlp.down_proj.weight": (HIDDEN, INTER),
        })
    shapes["model.norm.weight"] = (HIDDEN,)
    shapes["lm_head.weight"] = (VOCAB, HIDDEN)
    return shapes


def write_streaming_safetensors(path: Path, shapes: dict[str, tuple[int, ...]], pool: bytes) -> int:
    """BF16 safetensors written tensor by tensor from a pool of random bytes (bounded RAM)."""
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, shape in shapes.items():
        n = int(np.prod(shape)) * 2
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        for name, shape in shapes.items():
            left = int(np.prod(shape)) * 2
            while left:
                step = min(left, len(pool))
                f.write(pool[:step])
                left -= step
    return offset


def write_checkpoint(dest: Path, layers: int) -> tuple[int, int]:
    """A 3-shard BF16 checkpoint; returns (weight bytes, largest tensor elements)."""
    from tests.factory.checkpoints import write_tiny_checkpoint

    dest.mkdir(parents=True, exist_ok=True)
    # Tokenizer files and a config template from the factory (vocab padded to 32000).
    write_tiny_checkpoint(dest, arch="tinyllama")
    for f in dest.glob("*.safetensors"):
        f.unlink()
    config = json.loads((dest / "config.json").read_text())
    config.update(hidden_size=HIDDEN, intermediate_size=INTER, num_attention_heads=HEADS,
                  num_key_value_heads=KV_HEADS, head_dim=HIDDEN // HEADS, vocab_size=VOCAB,
                  num_hidden_layers=layers, torch_dtype="bfloat16")
    (dest / "config.json").write_text(json.dumps(config))
    rng = np.random.default_rng(0)
    values = (rng.standard_normal(CHUNK // 2, dtype=np.float32) * 0.02).view(np.uint32)
    pool = (values >> np.uint32(16)).astype("<u2").tobytes()
    shapes = tensor_shapes(layers)
    names = list(shapes)
    groups = np.array_split(np.arange(len(names)), 3)
    weight_map, total = {}, 0
    for k, group in enumerate(groups, start=1):
        file = dest / f"model-{k:05d}-of-00003.safetensors"
        part = {names[i]: shapes[names[i]] for i in group}
        total += write_streaming_safetensors(file, part, pool)
        weight_map.update({n: file.name for n in part})
    (dest / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": total}, "weight_map": weight_map}))
    largest = max(int(np.prod(s)) for s in shapes.values())
    return total, largest


CHILD = r"""
import sys, time
sys.path.insert(0, sys.argv[1])
from quantize.convert import convert
def hwm():
    for line in open("/proc/self/status"):
        if line.startswith(("VmHWM", "VmRSS")):
            yield line.split()[0][:-1], int(line.split()[1]) * 1024
if sys.argv[2] == "baseline":
    print(dict(hwm()))
else:
    t = time.perf_counter()
    convert(sys.argv[2], sys.argv[3], "f16")
    print({**dict(hwm()), "seconds": time.perf_counter() - t})
"""


def run_child(*args: str) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, str(REPO), *args], capture_output=True,
                         text=True, check=True)
    return eval(out.stdout.strip().splitlines()[-1])  # a dict literal we printed ourselves


def measure(root: Path, layers: int) -> dict:
    model = root / f"synthetic-{layers}L"
    t = time.perf_counter()
    weight_bytes, largest = write_checkpoint(model, layers)
    print(f"  wrote {weight_bytes / 1e9:.2f} GB checkpoint in {time.perf_counter() - t:.0f} s", flush=True)
    copy_dir = root / "copy"
    copy_dir.mkdir(exist_ok=True)
    t = time.perf_counter()
    for f in sorted(model.glob("*.safetensors")):
        shutil.copyfile(f, copy_dir / f.name)
    copy_s = time.perf_counter() - t
    shutil.rmtree(copy_dir)
    out = root / f"out-{layers}L.gguf"
    base = run_child("baseline")
    conv = run_child(str(model), str(out))
    out_bytes = out.stat().st_size
    out.unlink()
    shutil.rmtree(model)
    return {"layers": layers, "weight_bytes": weight_bytes, "largest_f32": largest * 4,
            "copy_s": copy_s, "convert_s": conv["seconds"], "peak": conv["VmHWM"],
            "baseline": base["VmHWM"], "out_bytes": out_bytes}


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="bench-convert-", dir="/tmp"))
    results = []
    try:
        for layers in (12, 40):
            print(f"{layers} layers:", flush=True)
            results.append(measure(root, layers))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    mb = 1e6
    print("\nBF16 safetensors -> F16 GGUF (3 shards, TinyLlama shapes)")
    print(f"{'model':>8} {'convert MB/s':>13} {'copy MB/s':>10} {'ratio':>6} {'peak RSS':>9} "
          f"{'import-only':>11} {'target':>8} {'peak/target':>11}")
    for r in results:
        target = 2 * r["largest_f32"] + 300 * 2**20
        conv_rate = r["weight_bytes"] / r["convert_s"] / mb
        copy_rate = r["weight_bytes"] / r["copy_s"] / mb
        print(f"{r['weight_bytes'] / 1e9:>6.2f}GB {conv_rate:>13.0f} {copy_rate:>10.0f} "
              f"{conv_rate / copy_rate:>6.2f} {r['peak'] / 2**20:>7.0f}MB {r['baseline'] / 2**20:>9.0f}MB "
              f"{target / 2**20:>6.0f}MB {r['peak'] / target:>11.2f}")
    growth = results[-1]["peak"] - results[0]["peak"]
    size_growth = results[-1]["weight_bytes"] - results[0]["weight_bytes"]
    print(f"peak RSS grew {growth / 2**20:.0f} MB while the model grew {size_growth / 2**20:.0f} MB "
          f"(largest tensor {results[0]['largest_f32'] / 2**20:.0f} MB as float32)")


if __name__ == "__main__":
    main()
