#!/usr/bin/env bash
# The engine's decode speed on a CUDA GPU beside llama.cpp's own llama-bench, same build.
#
# Where tokens are fast (a GPU), the engine's Python work per token weighs most. This builds
# the pinned llama.cpp (vendor/llama.cpp of the llama-cpp-python sdist) ONCE with CMake —
# llama-bench and the shared libraries — and points llama-cpp-python at those libraries
# (LLAMA_CPP_LIB_PATH), so the engine and llama-bench run the very same kernels. Then a
# synthetic Llama-shaped checkpoint (tests/benchmarks/bench_convert.py) is quantized to
# Q4_K_M by QuantDesk, and decode speed is measured at the same depth on both sides,
# alternating, with every layer on the GPU and flash attention off on both.
#
# For a machine with nvcc, cmake, numpy and numba and no network. Prepare, in the repository
# root of a machine with PyPI (the folder is ignored through .git/info/exclude):
#   mkdir -p gpu_inputs; pip download --no-deps --only-binary=:all: --python-version 3.12 \
#       --platform manylinux2014_x86_64 --platform any -d gpu_inputs gguf platformdirs diskcache \
#       jinja2 markupsafe typing_extensions pyyaml tqdm
#   and the sdist (pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36) packed
#   again without .git, models, docs, tests and tools/ui as
#   gpu_inputs/llama_cpp_python-0.3.36-trim.tar.gz (76 -> 11 MB).
# Run: bash packaging/cuda_decode_check.sh   (LAYERS=22 by default; OUT=/tmp/cuda-decode)
set -uo pipefail
OUT=${OUT:-/tmp/cuda-decode}; mkdir -p "$OUT"
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export PATH=/usr/local/cuda/bin:$PATH PYTHONUNBUFFERED=1 QUANTDESK_HOME=/tmp/qdhome
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; python3 -V
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site gpu_inputs/*.whl || exit 3
tar xzf gpu_inputs/llama_cpp_python-0.3.36-trim.tar.gz -C /tmp || exit 3
SRC=/tmp/llama_cpp_python-0.3.36
cp -r "$SRC/llama_cpp" /tmp/site/
t "configure"
# The CPU options QuantDesk's own builds use (llama_cmake_args.py: no AMX kernels), CUDA for sm_90.
ARGS="$(python3 packaging/llama_cmake_args.py --backend cuda 2>/dev/null)" || ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_CUDA=ON"
ARGS="$(echo "$ARGS" | sed 's/-DCMAKE_CUDA_ARCHITECTURES=[^ ]*//') -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_CUDA_NCCL=OFF -DGGML_CUDA_FA=OFF"
echo "CMake options: $ARGS"
cmake -S "$SRC/vendor/llama.cpp" -B /tmp/b -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF \
    -DLLAMA_OPENSSL=OFF $ARGS > "$OUT/configure.log" 2>&1 || { tail -30 "$OUT/configure.log"; exit 4; }
t "build llama-bench and the libraries"
cmake --build /tmp/b -j16 --target llama-bench llama > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 4; }
ls /tmp/b/bin
export LLAMA_CPP_LIB_PATH=/tmp/b/bin LD_LIBRARY_PATH=/tmp/b/bin PYTHONPATH=/tmp/site:$PWD
python3 -c "import llama_cpp; print('llama_cpp', llama_cpp.__version__, 'gpu offload:', llama_cpp.llama_supports_gpu_offload())" || exit 5
t "synthetic checkpoint -> Q4_K_M"
python3 - <<'PY' || exit 6
import json, os, time
from pathlib import Path
from tests.benchmarks.bench_convert import write_checkpoint
from quantize.ftypes import FILE_TYPES
from quantize.job import QuantizeOptions, QuantizeTarget, quantize_model
w, _ = write_checkpoint(Path("/tmp/ck"), int(os.environ.get("LAYERS", 22)))
c = Path("/tmp/ck/config.json"); cfg = json.loads(c.read_text()); cfg["max_position_embeddings"] = 4096; c.write_text(json.dumps(cfg))
s = time.perf_counter()
quantize_model(Path("/tmp/ck"), [QuantizeTarget(FILE_TYPES["Q4_K_M"], Path("/tmp/m.gguf"))], QuantizeOptions(threads=16))
print(f"checkpoint {w/1e9:.2f} GB -> Q4_K_M {Path('/tmp/m.gguf').stat().st_size/1e6:.0f} MB in {time.perf_counter()-s:.1f} s")
PY
t "decode: engine vs llama-bench, alternated"
# A file, not stdin: the engine process is spawned, and spawn re-imports the main module.
cat > /tmp/decode_vs_llama_bench.py <<'PY'
import json, os, statistics, subprocess, sys
sys.path.insert(0, os.getcwd())
from models.engine import ChatOptions, EngineClient, LoadSettings
MODEL = os.environ.get("MODEL", "/tmp/m.gguf")
GEN, PAIRS = int(os.environ.get("GEN", 256)), int(os.environ.get("PAIRS", 5))
GPU_LAYERS, THREADS = int(os.environ.get("GPU_LAYERS", -1)), int(os.environ.get("THREADS", 8))
def bench_once(depth):
    out = subprocess.run([os.environ.get("LLAMA_BENCH", "/tmp/b/bin/llama-bench"), "-m", MODEL, "-ngl", "99" if GPU_LAYERS else "0", "-t", str(THREADS), "-fa", "0",
                          "-p", "0", "-n", str(GEN), "-d", str(depth), "-r", "1", "-o", "json"],
                         capture_output=True, text=True, timeout=120)
    rows = json.loads(out.stdout)
    return rows[-1]["avg_ts"]
if __name__ == "__main__":
    client = EngineClient()
    client.load(MODEL, LoadSettings(gpu_layers=GPU_LAYERS, threads=THREADS, batch_threads=THREADS,
                                    context_length=2048, flash_attention=False))
    prompt = " ".join(["word"] * 250)
    ours, ref = [], []
    for i in range(PAIRS):
        r = client.chat(None, ChatOptions(temperature=0.0, max_tokens=GEN, ignore_eos=True),
                        prompt=prompt + f" {i}").wait()
        ours.append(r.stats.decode_tokens_per_second)
        ref.append(bench_once(r.stats.prompt_tokens))
        print(f"pair {i}: engine {ours[-1]:.1f} tok/s (prompt {r.stats.prompt_tokens}), llama-bench {ref[-1]:.1f} tok/s")
    ratios = [a / b for a, b in zip(ours, ref)]
    print(f"engine decode {statistics.median(ours):.1f} tok/s, llama-bench {statistics.median(ref):.1f} tok/s, "
          f"median ratio {statistics.median(ratios):.3f} (goal >= 0.97)")
    client.shutdown()
PY
python3 /tmp/decode_vs_llama_bench.py || tail -30 /tmp/qdhome/logs/quantdesk.log
t "done"
