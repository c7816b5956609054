"""Train a small Qwen2 model offline, reproducibly, and convert it to an F16 GGUF.

The fit-to-size benchmark needs a second architecture whose weights were *learned*: random
weights make every quantization loss alike, and SmolLM2 (the other test model) ships as Q4_1,
so its F16 already lies on Q4_1's grid. This script makes one on the CPU in minutes:

- **text**: the Python standard library's own ``.py`` sources, read in sorted order (no
  tests, no ``pydoc_data``: ``bench_fit_size.py`` measures on ``pydoc_data``'s documentation
  topics, so the two never share text);
- **tokenizer**: a byte-level BPE with Qwen2's pre-tokenizer (the test factory's writer),
  trained on that text to ``--vocab`` tokens;
- **model**: transformers' ``Qwen2ForCausalLM`` (rows of 256 and 768 columns, so every
  k-quant and i-quant applies), fixed seed, a fixed number of AdamW steps on a fixed number
  of threads (so the same settings give the same weights) — bounded in time by the step count;
- **output**: ``quantdesk convert`` to F16, cached under the test models folder
  (``~/.cache/quantdesk-test-models/trained-qwen2-<settings>/``), with the held-out
  perplexity (on the benchmark's own ``pydoc_data`` text) in ``training.json`` beside it.

    nice -n 19 python tests/benchmarks/train_small_model.py [--steps 300] [--layers 6] [--hidden 256]

Prints the F16 file's path last.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script from anywhere

from tests.factory.checkpoints import CHATML_TEMPLATE, _finish_tokenizer_config  # noqa: E402
from tests.factory.tokenizer_flavours import write_byte_level_bpe  # noqa: E402


def training_text() -> str:
    """The standard library's sources (tests and the documentation topics left out), sorted."""
    root = Path(sysconfig.get_paths()["stdlib"])
    skip = {"test", "tests", "idle_test", "pydoc_data", "site-packages", "dist-packages", "__pycache__",
            "lib2to3", "turtledemo"}
    files = sorted(p for p in root.rglob("*.py") if not skip & set(p.relative_to(root).parts))
    return "\n\n".join(p.read_text(encoding="utf-8", errors="replace") for p in files)


def heldout_text() -> str:
    """The text bench_fit_size.py measures on (Python's documentation topics)."""
    import pydoc_data.topics as topics

    return "\n\n".join(topics.topics[k] for k in sorted(topics.topics))


def settings_key(args: argparse.Namespace) -> str:
    fields = {k: getattr(args, k) for k in ("steps", "layers", "hidden", "ffn", "heads", "kv_heads", "vocab",
                                            "seq", "batch", "lr", "seed", "threads")}
    fields["python"] = sys.version.split()[0]
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:10]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300, help="AdamW steps (the time bound)")
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--ffn", type=int, default=768)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--kv-heads", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=4096)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2, help="torch threads (part of the settings: sums differ)")
    parser.add_argument("--out", type=Path, help="folder (default: under the test models cache)")
    args = parser.parse_args()

    import numpy as np
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM
    from tokenizers import Tokenizer

    from tests.conftest import cached_models_dir

    folder = args.out or cached_models_dir() / f"trained-qwen2-{settings_key(args)}"
    gguf = folder / "trained-qwen2-F16.gguf"
    if gguf.exists():
        print(f"cached: {gguf}")
        print(gguf)
        return 0
    hf = folder / "hf"
    hf.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    text = training_text()
    # The tokenizer learns from paragraphs (a list of strings streams through the trainer).
    files = write_byte_level_bpe(hf, "qwen2", args.vocab, 4 * args.seq, corpus=text.split("\n\n"))
    _finish_tokenizer_config(hf, CHATML_TEMPLATE)
    tokenizer = Tokenizer.from_file(str(hf / "tokenizer.json"))
    ids = np.array(tokenizer.encode(text).ids, dtype=np.int64)
    held = np.array(tokenizer.encode(heldout_text()).ids, dtype=np.int64)
    print(f"text {len(text):,} chars -> {len(ids):,} tokens; held-out {len(held):,} tokens; "
          f"tokenizer {time.perf_counter() - start:.0f} s", flush=True)

    config = Qwen2Config(
        vocab_size=files.vocab_size, hidden_size=args.hidden, intermediate_size=args.ffn,
        num_hidden_layers=args.layers, num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
        head_dim=args.hidden // args.heads, max_position_embeddings=4 * args.seq, rope_theta=10000.0,
        rms_norm_eps=1e-6, tie_word_embeddings=False, bos_token_id=files.ids["<|endoftext|>"],
        eos_token_id=files.ids["<|im_end|>"], torch_dtype="float32", use_sliding_window=False)
    model = Qwen2ForCausalLM(config)
    params = sum(p.numel() for p in model.parameters())
    rng = np.random.default_rng(args.seed)
    starts = rng.integers(0, len(ids) - args.seq - 1, size=(args.steps, args.batch))
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1)
    warmup = max(1, args.steps // 20)
    schedule = torch.optim.lr_scheduler.LambdaLR(  # linear warm-up, then cosine down to a tenth
        optimizer, lambda s: min(1.0, (s + 1) / warmup) * (0.1 + 0.45 * (1 + math.cos(math.pi * s / args.steps))))
    print(f"Qwen2 {params / 1e6:.1f} M parameters, {args.steps} steps of {args.batch} x {args.seq} tokens",
          flush=True)
    model.train()
    train_start = time.perf_counter()
    for step in range(args.steps):
        batch = torch.from_numpy(np.stack([ids[s:s + args.seq] for s in starts[step]]))
        loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        if step % 25 == 0 or step == args.steps - 1:
            elapsed = time.perf_counter() - train_start
            print(f"step {step:>5}  loss {loss.item():.3f}  {elapsed:.0f} s  load {os.getloadavg()[0]:.1f}",
                  flush=True)
    train_seconds = time.perf_counter() - train_start

    model.eval()
    losses = []
    with torch.no_grad():
        for s in range(0, min(len(held), 64 * args.seq) - args.seq, args.seq):
            chunk = torch.from_numpy(held[s:s + args.seq])[None]
            losses.append(model(input_ids=chunk, labels=chunk).loss.item())
    ppl = math.exp(sum(losses) / len(losses))
    print(f"held-out perplexity {ppl:.1f} (vocabulary {files.vocab_size}) over {len(losses)} chunks", flush=True)
    model.save_pretrained(hf, safe_serialization=True)
    subprocess.run([str(Path(sys.executable).with_name("quantdesk")), "convert", str(hf), "--outtype", "f16", "-o", str(gguf)],
                   check=True, cwd=Path(__file__).resolve().parents[2])
    (folder / "training.json").write_text(json.dumps({
        **vars(args), "out": None, "parameters": params, "train_seconds": train_seconds,
        "heldout_ppl": ppl, "vocab_size": files.vocab_size, "training_tokens": len(ids)}, indent=1))
    print(gguf)
    return 0


if __name__ == "__main__":
    sys.exit(main())
