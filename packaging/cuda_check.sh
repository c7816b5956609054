#!/usr/bin/env bash
# QuantDesk on a CUDA machine, from the source checkout: build llama-cpp-python with CUDA from our
# llama_cmake_args.py, then `quantdesk doctor`, our one-pass quantize of a synthetic 2.2 GB
# checkpoint to Q4_K_M, and `quantdesk bench` with all, 12 and 0 layers on the GPU.
#
# Made for a GPU machine used for a few minutes, with no network (nvcc, cmake, ninja, scikit-build-core and numpy/numba
# already there). Prepare in the repository root, on a machine with PyPI:
#   echo /.whl/ >> .git/info/exclude; mkdir -p .whl
#   pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36 -d .whl, then unpack it and
#   pack it again as .whl/llama_cpp_python-0.3.36-trim.tar.gz without .git, vendor/llama.cpp/.git,
#   models, docs, benches and tools/ui/tests (76 -> 11 MB: under a 64 MiB transfer limit)
#   pip download --no-deps --only-binary=:all: --python-version 3.12 ... gguf platformdirs diskcache -d .whl
# Run: EXTRA_CMAKE="-DGGML_CUDA_FA=OFF" bash packaging/cuda_check.sh   (FA off: a 3.5 min build on
# 16 cores for sm_90 alone). Logs go to $OUT (default /tmp/cuda-check). Last seen (one NVIDIA H100, 16 cores,
# CUDA 13.0, 2026-11-26):
# 23/23 layers 588-615 tok/s, 12/23 86 tok/s, 0/23 45-47 tok/s.
set -uo pipefail
OUT=${OUT:-/tmp/cuda-check}; mkdir -p "$OUT"
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export PATH=/usr/local/cuda/bin:$PATH PYTHONUNBUFFERED=1 QUANTDESK_HOME=/tmp/qdhome
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nvcc --version | tail -2; lscpu | grep -i "model name\|^cpu(s)\|amx" | head -3
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 3
export PYTHONPATH=/tmp/site:$PWD
ARGS="$(python3 packaging/llama_cmake_args.py --backend cuda 2>&1)" || ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_CUDA=ON"
ARGS="$(echo "$ARGS" | sed 's/-DCMAKE_CUDA_ARCHITECTURES=[^ ]*//') -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_CUDA_NCCL=OFF ${EXTRA_CMAKE:-}"
t "build CMAKE_ARGS=$ARGS"
tar xzf .whl/llama_cpp_python-0.3.36-trim.tar.gz -C /tmp
CMAKE_ARGS="$ARGS" CMAKE_BUILD_PARALLEL_LEVEL=16 python3 -m pip wheel -q --no-build-isolation --no-deps -w /tmp/w /tmp/llama_cpp_python-0.3.36 > $OUT/build.log 2>&1 || { t "build FAILED"; tail -40 $OUT/build.log; exit 4; }
t "built: $(ls -la /tmp/w)"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site /tmp/w/*.whl || exit 5
python3 -c "import llama_cpp; print('llama_cpp', llama_cpp.__version__, 'gpu offload:', llama_cpp.llama_supports_gpu_offload())"
t "doctor"; python3 -m app.cli doctor 2>&1 | head -60
t "synthetic checkpoint + one-pass Q4_K_M (16 threads)"
python3 - <<'PY'
import time
from pathlib import Path
from tests.benchmarks.bench_convert import write_checkpoint
from quantize.ftypes import FILE_TYPES
from quantize.job import QuantizeOptions, QuantizeTarget, quantize_model
w, _ = write_checkpoint(Path("/tmp/ck"), int(__import__("os").environ.get("LAYERS", 22)))
import json; c = Path("/tmp/ck/config.json"); cfg = json.loads(c.read_text()); cfg["max_position_embeddings"] = 4096; c.write_text(json.dumps(cfg))
print(f"checkpoint {w/1e9:.2f} GB")
s = time.perf_counter(); quantize_model(Path("/tmp/ck"), [QuantizeTarget(FILE_TYPES["Q4_K_M"], Path("/tmp/m-Q4_K_M.gguf"))], QuantizeOptions(threads=16))
print(f"one pass folder -> Q4_K_M (first use: compiles Q4_K and Q6_K): {time.perf_counter()-s:.1f} s, {Path('/tmp/m-Q4_K_M.gguf').stat().st_size/1e6:.0f} MB")
PY
for L in -1 12 0; do t "bench --gpu-layers $L"; timeout 150 ${PY:-python3} -m app.cli bench /tmp/m-Q4_K_M.gguf --gpu-layers $L --ctx 2048 --runs 2 2>&1 | grep -v "^llama_\|^load_tensors\|^print_info\|^\.\+$" | tail -25; done
t "done"
