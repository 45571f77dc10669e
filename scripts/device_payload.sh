#!/usr/bin/env bash
# Packs what a GPU machine that starts bare needs to run dqt's CUDA build: the binaries of a
# build folder, the Debian libraries they link that such a machine lacks (oneDNN, Open MPI,
# sentencepiece, httplib, ...: everything but glibc and the C++ runtime; cuBLASLt comes with its
# CUDA toolkit), and prepared datasets. The archive goes to .device/ (ignored by git), which a
# device call carries; on the machine, from the repository root:
#
#     tar xJf .device/payload.tar.xz -C .device && source .device/payload/env.sh
#     $DQT train --device cuda ...        # and $DQT_CUDA_TESTS, $BENCH_CUDA; data/ links to the datasets
#
#     bash scripts/device_payload.sh BUILD_DIR [DATASET ...]     # e.g. build-cuda data/sotu-byte
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 1 ] || [ ! -x "$1/dqt" ]; then
  echo "device_payload: usage: scripts/device_payload.sh BUILD_DIR [DATASET ...] (BUILD_DIR: a cmake -DDQT_CUDA=ON build with dqt in it)" >&2
  exit 2
fi
build=$1; shift
staging=$(mktemp -d)
trap 'rm -rf "$staging"' EXIT
mkdir -p "$staging/payload/bin" "$staging/payload/lib" "$staging/payload/data"
for binary in dqt dqt_cuda_tests bench_cuda; do
  [ -x "$build/$binary" ] && cp "$build/$binary" "$staging/payload/bin/"
done
# Every library the binaries resolve under /lib or /usr/lib, but glibc's and the C++ runtime's.
for library in $(ldd "$staging"/payload/bin/* | awk '$3 ~ /^\/(usr\/)?lib/ {print $3}' | sort -u); do
  case $(basename "$library") in
    libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|librt.so.*|libgcc_s.so.*|libstdc++.so.*) ;;
    *) cp -L "$library" "$staging/payload/lib/" ;;
  esac
done
for dataset in "$@"; do
  [ -f "$dataset/meta.json" ] || { echo "device_payload: $dataset is not a prepared dataset (no meta.json)" >&2; exit 2; }
  cp -r "$dataset" "$staging/payload/data/"
done
cat > "$staging/payload/env.sh" <<'EOF'
# Sourced on the GPU machine from the repository root, after unpacking into .device/.
payload=$PWD/.device/payload
export LD_LIBRARY_PATH=$payload/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export DQT=$payload/bin/dqt DQT_CUDA_TESTS=$payload/bin/dqt_cuda_tests BENCH_CUDA=$payload/bin/bench_cuda
mkdir -p data
for dataset in "$payload"/data/*; do [ -e "data/$(basename "$dataset")" ] || ln -s "$dataset" "data/$(basename "$dataset")"; done
EOF
mkdir -p .device
tar cJf .device/payload.tar.xz -C "$staging" payload
echo "device_payload: .device/payload.tar.xz, $(du -h .device/payload.tar.xz | cut -f1) (carry .device)"
