#!/usr/bin/env bash
# The CUDA backend's build (cmake -DDQT_CUDA=ON, in build-cuda/: dqt with --device cuda, the
# GPU tests, bench_cuda) and its tests. On a machine
# without a GPU the tests say "skipped: no GPU" and pass: CI checks that the CUDA code compiles
# and that the GPU-free parts (the one-line error without a GPU) hold. Needs nvcc (CUDA 13.0 tested;
# /usr/local/cuda/bin/nvcc is found without PATH).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v nvcc >/dev/null && [ ! -x /usr/local/cuda/bin/nvcc ]; then
  echo "check_cuda_build: no nvcc (install the CUDA toolkit: /usr/local/cuda)" >&2
  exit 1
fi
cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DDQT_CUDA=ON >/dev/null
cmake --build build-cuda -j"$(nproc)" --target dqt dqt_cuda_tests bench_cuda
build-cuda/dqt_cuda_tests
