#!/bin/bash
# Repeated `dqt bench generate` runs of the random 154M ternary model: each of RUNS rounds
# measures 1 and 2 threads with an fp32 and an fp16 KV cache, one after the other, so that the
# spread a shared machine adds shows beside each figure (docs/results.md, "One inference
# engine at the memory-bandwidth limit"). Needs build/dqt and, for the llama.cpp columns,
# tools/llamacpp (scripts/setup.sh); run it on an otherwise idle machine.
#
#     bash scripts/bench_generate_series.sh [RUNS]    (default 3; about 2 minutes per round)
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-3}"
if ! [[ "$runs" =~ ^[1-9][0-9]*$ ]]; then
    echo "bench_generate_series.sh: RUNS must be a positive whole number, got '$runs'" >&2
    exit 2
fi
if [[ ! -x build/dqt ]]; then
    echo "bench_generate_series.sh: build/dqt is missing: run scripts/setup.sh first" >&2
    exit 1
fi
for run in $(seq 1 "$runs"); do
    for threads in 1 2; do
        for cache in f32 f16; do
            echo "=== run $run, threads $threads, KV cache $cache"
            build/dqt bench generate --threads "$threads" --kv-cache "$cache" --repeats 10 | tail -n 4
        done
    done
done
