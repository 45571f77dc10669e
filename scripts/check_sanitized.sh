#!/usr/bin/env bash
# The test suite under sanitizers (CI runs it after the plain suite):
#   address  build-asan: GCC with AddressSanitizer + UndefinedBehaviorSanitizer, the whole suite
#            but the learning checks LossFallsBelowUnigram
#            (the dqt binary the CLI tests run is built the same way)
#   thread   build-tsan: clang with ThreadSanitizer, the tests that run threaded kernels,
#            training and inference at 1 and 2 threads; OpenMP's own synchronisation is made
#            visible to TSan by LLVM's libarcher (OMP_TOOL_LIBRARIES)
#   bash scripts/check_sanitized.sh [address|thread ...]    (default: both)
set -euo pipefail
cd "$(dirname "$0")/.."
kinds=("$@")
[ ${#kinds[@]} -gt 0 ] || kinds=(address thread)
jobs=$(nproc)
# Line tables (-g1) rather than full debug information: a sanitizer's report needs only file and
# line, and without variable locations the builds ran about a quarter faster (test_serve.cpp 56
# against 74 s under ASan + UBSan on a Zen 3); the CI's time limit is what this spends.
line_tables=(-DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG")

run_address() {
  cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo "${line_tables[@]}" -DDQT_SANITIZE=address > /dev/null
  # The suite and the dqt binary it runs; not the benchmarks, which no test runs.
  cmake --build build-asan -j"$jobs" --target dqt_tests > build-asan/build.log 2>&1 ||
    { tail -30 build-asan/build.log; echo "check_sanitized: the ASan build failed (build-asan/build.log)" >&2; return 1; }
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  local asan=check_initialization_order=1:strict_init_order=1
  # Not the LossFallsBelowUnigram runs: they check learning, not memory, and took about 15 of the
  # 51 minutes of this phase on an Intel Xeon (docs/reliability.md); each method's training code
  # still runs under ASan in ResumeReproducesUninterruptedRunBitForBit, and every test runs in
  # the plain suite.
  ASAN_OPTIONS="$asan:detect_leaks=1" ctest --test-dir build-asan --output-on-failure -j"$jobs" \
    -E '^DataParallelRun\.|^Methods/TrainMethod\.LossFallsBelowUnigram/'
  # The mpirun tests without leak checks: Open MPI leaves allocations of its plugins at exit, from
  # libraries it has already unloaded, so no suppression can name them. dqt's own code runs the
  # same paths on one rank above, with leak checks.
  ASAN_OPTIONS="$asan:detect_leaks=0" ctest --test-dir build-asan --output-on-failure -j"$jobs" -R '^DataParallelRun\.'
}

run_thread() {
  command -v clang++ > /dev/null || { echo "check_sanitized: clang++ missing: apt-get install clang libomp-dev" >&2; return 1; }
  local archer
  archer=$(find /usr/lib/llvm-*/lib -name libarcher.so 2> /dev/null | sort -V | tail -1)
  [ -n "$archer" ] || { echo "check_sanitized: libarcher.so missing: apt-get install libomp-dev" >&2; return 1; }
  CC=clang CXX=clang++ cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo "${line_tables[@]}" -DDQT_SANITIZE=thread > /dev/null
  cmake --build build-tsan -j"$jobs" --target dqt_tests > build-tsan/build.log 2>&1 ||
    { tail -30 build-tsan/build.log; echo "check_sanitized: the TSan build failed (build-tsan/build.log)" >&2; return 1; }
  local threaded='Gemm.*:TernaryMatmul.*:Int8Matmul.*:Kernel*:Inference.*:Sampling.*'
  threaded+=':*ThreadCount*:*OneAndTwoThreads*:*BitIdenticalForOneAndTwoThreads*:ModelGradient*Threads*:SpinBarrier.*:BackgroundCheckpoint.*'
  threaded+=':WireQuantizer.*:Serve.*'
  OMP_TOOL_LIBRARIES="$archer" OMP_NUM_THREADS=2 \
  TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/.ci/tsan.supp" \
    build-tsan/dqt_tests --gtest_filter="$threaded" --gtest_brief=1
}

for kind in "${kinds[@]}"; do
  case "$kind" in
    address) echo "== ASan + UBSan: the whole test suite"; run_address ;;
    thread) echo "== TSan: the threaded tests"; run_thread ;;
    *) echo "check_sanitized: unknown kind '$kind' (address or thread)" >&2; exit 2 ;;
  esac
done
echo "check_sanitized: ${kinds[*]}: passed"
