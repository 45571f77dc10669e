#!/usr/bin/env bash
# Fuzzes every reader of untrusted files (fuzz/reader_targets.h) with libFuzzer under ASan and
# UBSan: builds build-fuzz with clang, then runs each fuzz_<reader> for SECONDS, starting from
# the seeds in fuzz/seeds/<reader> plus what earlier runs found (build-fuzz/corpus/<reader>).
#   bash scripts/fuzz.sh                 60 s per reader (CI)
#   bash scripts/fuzz.sh 3600 gguf       one hour on the GGUF reader
#   DQT_FUZZ_SEED=7 bash scripts/fuzz.sh another seed of libFuzzer's mutations (default fixed, so
#                                        that a run from the same corpus replays; printed below)
# Prints one line per reader (inputs run, accepted, refused cleanly, crashes, hangs, out of memory,
# corpus size) and exits non-zero when an input broke
# a reader's contract; each such input is kept in build-fuzz/findings/. Fix the reader, then copy
# the input to fuzz/regressions/<reader>/ (the test suite replays that folder).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
shift || true
readers=("$@")
# Every reader by default: each has its seed folder.
[ ${#readers[@]} -gt 0 ] || mapfile -t readers < <(ls fuzz/seeds)
[[ "$seconds" =~ ^[1-9][0-9]*$ ]] || { echo "fuzz.sh: SECONDS must be a positive whole number, not '$seconds'" >&2; exit 2; }
seed="${DQT_FUZZ_SEED:-20261124}"
[[ "$seed" =~ ^[1-9][0-9]{0,8}$ ]] || { echo "fuzz.sh: DQT_FUZZ_SEED must be a whole number from 1 to 999999999, not '$seed'" >&2; exit 2; }
for reader in "${readers[@]}"; do
  [ -d "fuzz/seeds/$reader" ] || { echo "fuzz.sh: unknown reader '$reader' (see fuzz/seeds/)" >&2; exit 2; }
done
command -v clang++ >/dev/null || { echo "fuzz.sh: clang++ missing: apt-get install clang libclang-rt-dev libomp-dev" >&2; exit 1; }

# Line tables only (-g1): a finding's stack needs file and line, not variable locations.
CC=clang CXX=clang++ cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" \
  -DDQT_FUZZ=ON > /dev/null
cmake --build build-fuzz -j"$(nproc)" --target "${readers[@]/#/fuzz_}" > build-fuzz/build.log 2>&1 ||
  { tail -30 build-fuzz/build.log; echo "fuzz.sh: the fuzz build failed (log: build-fuzz/build.log)" >&2; exit 1; }

mkdir -p build-fuzz/findings build-fuzz/logs
fuzz_one() {
  local reader=$1
  mkdir -p "build-fuzz/corpus/$reader"
  # A reader may use 2 GB at most (-rss_limit_mb, -malloc_limit_mb); one input 10 s at most.
  ASAN_OPTIONS=detect_leaks=1 "build-fuzz/fuzz_$reader" -seed="$seed" -max_total_time="$seconds" -timeout=10 \
    -rss_limit_mb=2048 -malloc_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="build-fuzz/findings/$reader-" "build-fuzz/corpus/$reader" "fuzz/seeds/$reader" \
    > "build-fuzz/logs/$reader.log" 2>&1
}
# One fuzzer per core at a time.
failed=()
jobs_at_once=$(nproc)
for ((i = 0; i < ${#readers[@]}; i += jobs_at_once)); do
  pids=()
  for reader in "${readers[@]:i:jobs_at_once}"; do
    fuzz_one "$reader" &
    pids+=("$!:$reader")
  done
  for entry in "${pids[@]}"; do
    wait "${entry%%:*}" || failed+=("${entry#*:}")
  done
done

# libFuzzer names what it keeps by kind: crash- (a broken contract, a sanitizer report, a
# signal) and leak- (counted as crashes), timeout- (an input over 10 s), oom- (over 2 GB).
count_findings() { find build-fuzz/findings -name "$1-$2-*" -type f | wc -l; }
echo "fuzz.sh: DQT_FUZZ_SEED=$seed"
printf '%-14s %8s %10s %10s %10s %8s %6s %6s %7s\n' reader seconds runs accepted refused crashes hangs oom corpus
for reader in "${readers[@]}"; do
  log="build-fuzz/logs/$reader.log"
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
  accepted=$(grep -a -o 'dqt fuzz: accepted [0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
  refused=$(grep -a -o 'refused cleanly [0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
  corpus=$(find "build-fuzz/corpus/$reader" -type f | wc -l)
  printf '%-14s %8s %10s %10s %10s %8s %6s %6s %7s\n' "$reader" "$seconds" "${runs:-?}" "${accepted:-?}" \
    "${refused:-?}" "$(($(count_findings "$reader" crash) + $(count_findings "$reader" leak)))" "$(count_findings "$reader" timeout)" \
    "$(count_findings "$reader" oom)" "$corpus"
done
if [ ${#failed[@]} -gt 0 ]; then
  for reader in "${failed[@]}"; do
    echo "fuzz.sh: $reader broke its contract (DQT_FUZZ_SEED=$seed); log build-fuzz/logs/$reader.log:" >&2
    grep -a -E "dqt fuzz:|ERROR:|SUMMARY:|Test unit written" "build-fuzz/logs/$reader.log" | head -5 >&2
  done
  exit 1
fi
echo "fuzz.sh: no reader broke its contract"
