#!/usr/bin/env bash
# The whole test suite on a fresh Debian 12 machine: installs what is missing, configures,
# builds and runs every test (unit, BPF, integration), then the same unit and integration
# tests again in an ASan+UBSan build, then the libFuzzer targets for a short fixed time each
# in a clang build of their own (build-fuzz; README "Fuzzing").
#
#   tools/test.sh              everything
#   tools/test.sh --fast       skip the sanitizer and fuzz builds
#   tools/test.sh -- -R steer  extra arguments after -- go to ctest (not to the fuzz stage)
set -euo pipefail
cd "$(dirname "$0")/.."

sanitize=1
ctest_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --fast) sanitize=0 ;;
    --) shift; ctest_args=("$@"); break ;;
    *) echo "usage: $0 [--fast] [-- ctest args]" >&2; exit 2 ;;
  esac
  shift
done

tools/setup.sh
jobs=$(nproc)

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$jobs"
(cd build && ctest --output-on-failure --timeout 600 "${ctest_args[@]}")

if [ "$sanitize" = 1 ]; then
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DVECFLOW_SANITIZE=ON >/dev/null
  cmake --build build-asan -j "$jobs"
  # Benchmarks measure speed, which a sanitizer build does not represent.
  (cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:fast_unwind_on_malloc=0 \
     LSAN_OPTIONS="suppressions=$PWD/../tests/sanitizer/lsan.supp" \
     UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
     ctest --output-on-failure --timeout 900 -LE bench "${ctest_args[@]}")

  # Each fuzz target runs VECFLOW_FUZZ_SECONDS (20 s) from its seed corpus; a crash, a leak or
  # a broken invariant fails its test and leaves the input in build-fuzz/tests/fuzz/<target>/.
  cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DVECFLOW_FUZZ=ON \
    -DCMAKE_C_COMPILER=clang-19 -DCMAKE_CXX_COMPILER=clang++-19 >/dev/null
  cmake --build build-fuzz -j "$jobs" --target fuzz_targets
  (cd build-fuzz && ctest --output-on-failure -L fuzz)
fi
echo "test.sh: all tests passed"
