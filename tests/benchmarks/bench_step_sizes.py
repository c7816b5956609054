"""Benchmark: what one ``llama_decode`` of a sequence's N tokens costs, and whether it rounds
as reading them one at a time does — the two facts prompt lookup's plan rests on.

One sequence, after ``--context`` tokens already in its cache, reads N more tokens in one
batch (logits at every position), for each N of ``--sizes``; the time is the median over
``--runs`` (sizes taking turns within each run), printed in one-token steps (N = 1) and as
tokens per one-token step's time — what a draft of N − 1 tokens kept whole can give at
most. Beside it, the largest difference between the logits of that batch and those of the
same tokens read one at a time (plain decoding): 0 where the batch is plain decoding's
token for token. On CPU with flash attention, 64 or more queries of a sequence take
llama.cpp's tiled kernel, faster and rounding otherwise (``speculation.MOST_STEP_TOKENS``).

Run: ``.venv/bin/python tests/benchmarks/bench_step_sizes.py [MODEL.gguf] [--threads 1]
[--context 1536] [--sizes 1,2,3,5,9,17,32,33,63,64,65,129] [--runs 5] [--f32]
[--no-flash-attention]`` (SmolLM2-135M-Instruct unless a path is given; ``--f32`` reads its
weights dequantized to F32).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import llama_cpp  # noqa: E402

from models.engine import runtime  # noqa: E402
from models.engine.llama_log import LlamaLogCapture  # noqa: E402
from models.engine.settings import LoadSettings  # noqa: E402
from models.quality.worker import TokenBatch  # noqa: E402
from tests.benchmarks import llama_tools  # noqa: E402
from tests.conftest import cached_models_dir, fetch_smollm2  # noqa: E402


class Sequence:
    """Sequence 0 of a loaded model, read a batch at a time."""

    def __init__(self, model: runtime.LoadedModel, tokens: list[int]) -> None:
        self.ctx = model.llm.ctx
        self.memory = llama_cpp.llama_get_memory(self.ctx)
        self.n_vocab = model.llm.n_vocab()
        self.tokens = np.asarray(tokens, dtype=np.int32)
        self.batch = TokenBatch(llama_cpp, max(512, len(tokens)))

    def read(self, start: int, count: int, logits: bool = True) -> float:
        """Read tokens ``start`` … ``start + count`` in one batch; its seconds."""
        self.batch.fill([self.tokens[start:start + count]], start,
                        start if logits else start + count)
        began = time.perf_counter()
        if llama_cpp.llama_decode(self.ctx, self.batch.batch) != 0:
            raise RuntimeError(f"llama_decode failed on {count} tokens")
        return time.perf_counter() - began

    def rows(self, count: int) -> np.ndarray:
        """The logits of the last batch's ``count`` positions."""
        return np.stack([np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(self.ctx, i),
                                               shape=(self.n_vocab,)).copy()
                         for i in range(count)])

    def forget(self, start: int) -> None:
        """Remove the cells from position ``start`` on."""
        llama_cpp.llama_memory_seq_rm(self.memory, 0, start, -1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", type=Path)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--context", type=int, default=1536)
    parser.add_argument("--sizes", default="1,2,3,5,9,17,32,33,63,64,65,129")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--f32", action="store_true")
    parser.add_argument("--no-flash-attention", action="store_true")
    args = parser.parse_args()
    sizes = sorted({1, *(int(n) for n in args.sizes.split(","))})
    model_path = args.model or fetch_smollm2(cached_models_dir())
    with tempfile.TemporaryDirectory() as folder:
        if args.f32:
            from tests.quantize.model_files import write_dequantized_f16
            model_path = write_dequantized_f16(model_path, Path(folder) / "model-F32.gguf", "f32")
        flash = not args.no_flash_attention
        settings = LoadSettings(threads=args.threads, batch_threads=args.threads,
                                context_length=args.context + 2 * max(sizes) + 8,
                                batch_size=512, micro_batch_size=512, parallel=1,
                                flash_attention=flash)
        capture = LlamaLogCapture()  # kept: llama.cpp logs through it until the model is closed
        model = runtime.LoadedModel(str(model_path), settings, capture)
        text = "".join(p.read_text() for p in sorted((Path(__file__).parents[2] / "models"
                                                         / "engine").glob("*.py")))
        tokens = model.llm.tokenize(text.encode())[:args.context + max(sizes)]
        seq = Sequence(model, tokens)
        for start in range(0, args.context, 512):
            seq.read(start, min(512, args.context - start), logits=False)
        one_at_a_time = []
        for i in range(max(sizes)):
            seq.read(args.context + i, 1)
            one_at_a_time.append(seq.rows(1)[0])
        seq.forget(args.context)
        apart = {}
        times: dict[int, list[float]] = {n: [] for n in sizes}
        for run in range(args.runs):
            for n in sizes if run % 2 == 0 else sizes[::-1]:
                times[n].append(seq.read(args.context, n))
                if n not in apart:
                    apart[n] = float(np.abs(seq.rows(n) - np.stack(one_at_a_time[:n])).max())
                seq.forget(args.context)
        print(f"== {model_path.name}, {args.threads} thread(s), flash attention "
              f"{'on' if flash else 'off'}, after {args.context} tokens; "
              f"{llama_tools.machine_line()}")
        single = statistics.median(times[1])
        print(f"{'tokens':>6} {'ms':>9} {'one-token steps':>16} {'tokens per step time':>21} "
              f"{'max |logit diff| vs one at a time':>34}")
        for n in sizes:
            median = statistics.median(times[n])
            print(f"{n:6d} {median * 1000:9.2f} {median / single:16.2f} "
                  f"{n / (median / single):21.2f} {apart[n]:34.4f}")
        model.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
