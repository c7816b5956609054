"""Image encode time: QuantDesk's engine against llama.cpp's own ``llama-mtmd-cli``, on the
same files, one after the other in the same run.

The vision encoder has Gemma 3's shape (SigLIP so400m: width 1152, MLP 4304, 16 heads,
14-pixel patches, 896×896 pixels → 4096 patches pooled to 256 tokens; ``--layers`` of its
27 blocks, all by default) with random weights, made by the test factory and converted by
QuantDesk to an F16 mmproj; the text model is the factory's tiny Gemma 3 (the encoder's
time does not depend on it). Each run encodes a new 896×896 picture (so no cache helps):

- QuantDesk: the engine process with the model and its mmproj loaded once, a chat
  message with the picture; ``stats.image_encode_seconds`` (``mtmd_encode_chunk``);
- llama.cpp: ``llama-mtmd-cli -m TEXT --mmproj MMPROJ --image PNG -n 1``, built from the
  pinned llama.cpp with the engine's CPU options (:mod:`tests.benchmarks.llama_tools`,
  ``--target llama-mtmd-cli``); its log line "mtmd batch encoding done in N ms".

Both use the same thread count and libmtmd's defaults (flash attention "auto", a warm-up
encode at load). The two are interleaved run by run, so a busy machine slows both; the
ratio is llama.cpp's time over ours (≥ 1: QuantDesk as fast or faster), the median of the
runs' ratios first. With ``--swap`` every second run has llama-mtmd-cli go first.

Run: ``python tests/benchmarks/bench_image_encode.py [--layers 27] [--runs 5] [--threads 2]
[--swap] [--llama-tools DIR] [--work DIR]``
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.benchmarks import llama_tools  # noqa: E402

#: Gemma 3's vision encoder (SigLIP so400m at 896 pixels) and its 256 tokens per image.
GEMMA3_SIZES = {
    "vision_config": {"hidden_size": 1152, "intermediate_size": 4304, "num_hidden_layers": 27,
                      "num_attention_heads": 16, "image_size": 896, "patch_size": 14},
    "config": {"mm_tokens_per_image": 256},
    "preprocessor": {"size": {"height": 896, "width": 896}, "image_seq_length": 256},
}
SIDE = 896
ENCODED = re.compile(r"mtmd batch encoding done in (\d+) ms")


def make_model(work: Path, layers: int) -> tuple[Path, Path]:
    """The tiny Gemma 3 text model and a Gemma-3-sized F16 mmproj (made once per ``work``)."""
    from quantize.convert.convert import convert_with_projector
    from tests.factory.vision import write_tiny_vision_checkpoint

    text = work / f"gemma3-896-L{layers}.gguf"
    projector = work / f"mmproj-gemma3-896-L{layers}-F16.gguf"
    if text.is_file() and projector.is_file():
        return text, projector
    sizes = {**GEMMA3_SIZES, "vision_config": {**GEMMA3_SIZES["vision_config"], "num_hidden_layers": layers}}
    ck = write_tiny_vision_checkpoint(work / f"hf-L{layers}", "gemma3", dtype="float16", sizes=sizes)
    made_text, made_projector = convert_with_projector(ck.path, work / "converted.gguf", "f16")
    made_text.rename(text)
    made_projector.rename(projector)
    return text, projector


def pictures(work: Path, runs: int) -> list[Path]:
    from tests.factory.images import png_bytes, sample_picture

    out = []
    for run in range(runs):
        path = work / f"picture-{run}.png"
        if not path.is_file():
            path.write_bytes(png_bytes(sample_picture(SIDE, seed=100 + run)))
        out.append(path)
    return out


class OurEngine:
    """The engine process with the model and its encoder loaded."""

    def __init__(self, text: Path, projector: Path, threads: int) -> None:
        from models.engine import EngineClient, LoadSettings

        self.client = EngineClient()
        self.client.load(text, LoadSettings(threads=threads, batch_threads=threads, context_length=512,
                                            mmproj=str(projector)))

    def encode_seconds(self, picture: Path) -> float:
        from models.engine import ChatOptions

        message = {"role": "user", "content": [{"type": "image", "data": picture.read_bytes()},
                                                {"type": "text", "text": "Describe."}]}
        reply = self.client.chat([message], ChatOptions(max_tokens=1, temperature=0.0)).wait()
        assert reply.stats.images_encoded == 1, reply.stats
        return reply.stats.image_encode_seconds

    def close(self) -> None:
        self.client.shutdown()


def llama_encode_seconds(tools, text: Path, projector: Path, picture: Path, threads: int) -> float:
    """One ``llama-mtmd-cli`` run; the encode time its log reports."""
    run = subprocess.run([str(tools.path(llama_tools.MTMD_CLI)), "-m", str(text), "--mmproj", str(projector),
                          "--image", str(picture), "-p", "Describe.", "-n", "1", "--temp", "0",
                          "-t", str(threads), "-c", "512"],
                         env=tools.env(), capture_output=True, text=True, timeout=1800)
    found = ENCODED.search(run.stdout + run.stderr)
    if run.returncode != 0 or found is None:
        raise RuntimeError(f"llama-mtmd-cli failed ({run.returncode}):\n{(run.stdout + run.stderr)[-3000:]}")
    return int(found[1]) / 1000


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=27, help="encoder blocks (Gemma 3 has 27)")
    parser.add_argument("--runs", type=int, default=5, help="pictures encoded by each side")
    parser.add_argument("--threads", type=int, default=2, help="CPU threads, both sides")
    parser.add_argument("--work", type=Path, default=None, help="folder for the model files (kept)")
    parser.add_argument("--swap", action="store_true", help="every second run, llama-mtmd-cli goes first")
    llama_tools.add_argument(parser)
    args = parser.parse_args(argv)
    tools = llama_tools.require_tools(args.llama_tools, needed=(llama_tools.MTMD_CLI,))
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-image-encode-"))
    work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    text, projector = make_model(work, args.layers)
    print(f"encoder: Gemma 3's shape, {args.layers} blocks, F16 mmproj {projector.stat().st_size / 2**20:.0f} MiB "
          f"({time.perf_counter() - started:.0f} s to make); {SIDE}×{SIDE} pictures, {args.threads} threads",
          flush=True)
    engine = OurEngine(text, projector, args.threads)
    ours, theirs = [], []
    try:
        for run, picture in enumerate(pictures(work, args.runs)):
            if run % 2 == 0 or not args.swap:
                ours.append(engine.encode_seconds(picture))
                theirs.append(llama_encode_seconds(tools, text, projector, picture, args.threads))
            else:  # llama.cpp first: a machine whose load drifts favours neither side
                theirs.append(llama_encode_seconds(tools, text, projector, picture, args.threads))
                ours.append(engine.encode_seconds(picture))
            load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
            print(f"run {run + 1}: QuantDesk {ours[-1] * 1000:.0f} ms, llama-mtmd-cli {theirs[-1] * 1000:.0f} ms "
                  f"(ratio {theirs[-1] / ours[-1]:.3f}; load average {load})", flush=True)
    finally:
        engine.close()
    ours_median, theirs_median = statistics.median(ours), statistics.median(theirs)
    print(f"median encode: QuantDesk {ours_median * 1000:.0f} ms, llama-mtmd-cli {theirs_median * 1000:.0f} ms; "
          f"best: {min(ours) * 1000:.0f} vs {min(theirs) * 1000:.0f} ms")
    ratios = [t / o for t, o in zip(theirs, ours)]
    print(f"speed ratio (llama-mtmd-cli time / QuantDesk time): median of the runs' ratios "
          f"{statistics.median(ratios):.3f}, of the medians {theirs_median / ours_median:.3f}, "
          f"of the best {min(theirs) / min(ours):.3f} (goal >= 0.97)")
    print(f"machine: {llama_tools.machine_line()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
