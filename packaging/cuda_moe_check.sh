#!/usr/bin/env bash
# Experts on the CPU with the rest on a CUDA GPU: llama.cpp's buffers against memory_fit's
# prediction (tests/benchmarks/moe_offload_probe.py), on a CUDA machine with no network.
#
# Prepare in the repository root, on a machine with PyPI (the folder is not committed:
# list /gpu_inputs/ in .git/info/exclude and copy it along with the checkout):
#   mkdir gpu_inputs; a trimmed llama-cpp-python 0.3.36 sdist as
#   gpu_inputs/llama_cpp_python-0.3.36-trim.tar.gz (see cuda_check.sh), the wheels of
#   gguf diskcache jinja2 markupsafe pyyaml tqdm typing_extensions for the lease's Python, and
#   python -m tests.benchmarks.moe_offload_probe make gpu_inputs   (the 12 MB probe model)
# Run: bash packaging/cuda_moe_check.sh   (a 4-minute CUDA build without flash-attention
# kernels on 16 cores, then five loads). Output: $OUT (default /tmp/moe-check).
set -uo pipefail
OUT=${OUT:-/tmp/moe-check}; mkdir -p "$OUT/logs"
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export PATH=/usr/local/cuda/bin:$PATH PYTHONUNBUFFERED=1 QUANTDESK_HOME=/tmp/qdhome
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; python3 --version
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site gpu_inputs/*.whl || exit 3
export PYTHONPATH=/tmp/site:$PWD
if ! python3 -c "import llama_cpp, sys; sys.exit(0 if llama_cpp.llama_supports_gpu_offload() else 1)" 2>/dev/null; then
  ARGS="$(python3 packaging/llama_cmake_args.py --backend cuda 2>&1)" || ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_CUDA=ON"
  ARGS="$(echo "$ARGS" | sed 's/-DCMAKE_CUDA_ARCHITECTURES=[^ ]*//') -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_CUDA_NCCL=OFF -DGGML_CUDA_FA=OFF"
  t "build CMAKE_ARGS=$ARGS"
  tar xzf gpu_inputs/llama_cpp_python-0.3.36-trim.tar.gz -C /tmp
  CMAKE_ARGS="$ARGS" CMAKE_BUILD_PARALLEL_LEVEL=16 python3 -m pip wheel -q --no-build-isolation --no-deps -w /tmp/w /tmp/llama_cpp_python-0.3.36 > "$OUT/build.log" 2>&1 || { t "build FAILED"; tail -40 "$OUT/build.log"; exit 4; }
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site /tmp/w/*.whl || exit 5
fi
python3 -c "import llama_cpp; print('llama_cpp', llama_cpp.__version__, 'gpu offload:', llama_cpp.llama_supports_gpu_offload())"
t "probe"
MOE_PROBE_LOGS="$OUT/logs" python3 -m tests.benchmarks.moe_offload_probe run gpu_inputs/probe-qwen3-moe-Q4_K_M.gguf | tee "$OUT/probe.jsonl"
t "done"
