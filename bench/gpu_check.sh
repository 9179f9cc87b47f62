#!/usr/bin/env bash
# The GPU check of issue 18, for the few minutes a lent GPU machine gives (the device tool runs it
# in the repository root): what machine it is, a build of the CUDA kernels and their per-op test,
# and that test: every op against the CPU kernel (1e-5 relative, normwise; AdamW and the
# embeddings' sums bit for bit) and run twice for the same bits. Under 8 minutes; exit non-zero
# on any failure. Usage: bench/gpu_check.sh [--timeout SECONDS (300)]
set -u
cd "$(dirname "$0")/.."
LIMIT=300
[ "${1:-}" = --timeout ] && LIMIT=$2
t0=$(date +%s)
echo "== machine"
nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv 2>/dev/null || echo "no nvidia-smi"
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //') ($(nproc) cores)"
NVCC=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null || true)
[ -n "$NVCC" ] && "$NVCC" --version | tail -1 || { echo "FAIL: no nvcc here: nothing to build"; exit 1; }
echo "== build (make build/cuda/test_cuda_ops)"
mkdir -p build
if ! make -j"$(nproc)" NVCC="$NVCC" build/cuda/test_cuda_ops >build/gpu_build.log 2>&1; then
  tail -20 build/gpu_build.log
  echo "FAIL: the build failed"
  exit 1
fi
echo "built in $(($(date +%s) - t0)) s"
echo "== the CUDA kernels against the CPU kernels"
timeout "$LIMIT" build/cuda/test_cuda_ops --bench | tee build/gpu_check.log
rc=${PIPESTATUS[0]}
echo "== done in $(($(date +%s) - t0)) s, exit $rc"
grep -q SKIPPED build/gpu_check.log && { echo "FAIL: no GPU ran the test"; exit 1; }
exit $rc
