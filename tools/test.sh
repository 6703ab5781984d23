#!/usr/bin/env bash
# The whole test suite on a fresh Debian 12 machine: installs what is missing, configures,
# builds and runs every test (unit, BPF, integration, benchmark smoke runs), then the
# sanitizer build (clang, ASan+UBSan, coverage instrumentation) runs the unit and BPF tests,
# the integration tests labelled "sanitize" and the libFuzzer targets (tests/README.md,
# "Fuzzing").
# At the end it prints how long each stage took. The Debian packaging is checked in the ctest
# stage (appliance_deb_contents: the package debian/rules makes from build/, under lintian,
# 40-50 s here); the full dpkg-buildpackage is images/package-check.sh, not run here.
#
#   tools/test.sh              everything
#   tools/test.sh --fast       skip the sanitizer build
#   tools/test.sh --quick      unit tests only, in the default build (the edit-compile-test loop)
#   tools/test.sh -- -R steer  extra arguments after -- go to ctest (not to the fuzz stage)
set -euo pipefail
cd "$(dirname "$0")/.."

mode=full
ctest_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --fast) mode=fast ;;
    --quick) mode=quick ;;
    --) shift; ctest_args=("$@"); break ;;
    *) echo "usage: $0 [--fast|--quick] [-- ctest args]" >&2; exit 2 ;;
  esac
  shift
done

stages=()
stage() {  # name command...: runs the command, records its duration, stops the script on failure
  local name=$1 start=$SECONDS rc=0
  shift
  "$@" || rc=$?
  stages+=("$(printf '%-34s %5d s%s' "$name" $((SECONDS - start)) "$([ $rc = 0 ] || echo "  FAILED ($rc)")")")
  if [ $rc != 0 ]; then
    report
    exit $rc
  fi
}
report() {
  echo "test.sh: time per stage"
  printf '  %s\n' "${stages[@]}"
  printf '  %-34s %5d s\n' total "$SECONDS"
}

jobs=$(nproc)
# Unit and BPF tests run side by side; integration tests and benchmarks hold RUN_SERIAL (they
# share the machine's lcores and time themselves), so -j never overlaps them.
ctest_run() {  # build-dir ctest-args...
  local dir=$1
  shift
  (cd "$dir" && ctest --output-on-failure -j "$jobs" "$@")
}

# First, in every mode: each commit headline since f094fb6 is at most 72 characters
# (tools/check-commits.sh; skipped where the clone lacks that history).
stage "commit headlines" tools/check-commits.sh
stage setup tools/setup.sh
# Line tables only (-g1, clang's -gline-tables-only): perf, backtraces and the sanitizers'
# reports keep file:line, and the build takes 40 % less time than with full -g (variables'
# locations and types, which only a debugger reads).
# Unity build (tools/cmake/VecflowOptions.cmake): userspace/ and tools/ compile up to 8 sources as
# one, in half the time; tests/ keeps one object per source.
stage "configure" cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_UNITY_BUILD=ON \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" \
  -Wno-dev >/dev/null
if [ "$mode" = quick ]; then
  stage "build unit tests" cmake --build build -j "$jobs" --target unit_tests
  stage "ctest unit" ctest_run build --timeout 300 -L unit "${ctest_args[@]}"
  report
  echo "test.sh: unit tests passed (--quick: no BPF, integration, sanitizer or fuzz stages)"
  exit 0
fi
stage "build" cmake --build build -j "$jobs"
stage "ctest" ctest_run build --timeout 600 "${ctest_args[@]}"

if [ "$mode" = full ]; then
  # One clang build for the sanitizers and the fuzz targets (tools/cmake/VecflowOptions.cmake).
  stage "configure sanitizer" cmake -S . -B build-san -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_UNITY_BUILD=ON \
    -DVECFLOW_FUZZ=ON -DCMAKE_C_COMPILER=clang-19 -DCMAKE_CXX_COMPILER=clang++-19 \
    -DCMAKE_CXX_FLAGS_DEBUG=-gline-tables-only -DCMAKE_C_FLAGS_DEBUG=-gline-tables-only >/dev/null
  stage "build sanitizer" cmake --build build-san -j "$jobs"
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:fast_unwind_on_malloc=0
  export LSAN_OPTIONS="suppressions=$PWD/tests/sanitizer/lsan.supp"
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  # clang's runtimes symbolize through llvm-symbolizer; without it the suppressions, which name
  # functions, match nothing.
  ASAN_SYMBOLIZER_PATH=$(command -v llvm-symbolizer-19 || command -v llvm-symbolizer)
  export ASAN_SYMBOLIZER_PATH
  # The integration tests built there are those marked SANITIZE (tests/integration); the unit
  # tests run one process per binary, without the reference tests at scale (tests/CMakeLists.txt).
  stage "ctest sanitizer" ctest_run build-san --timeout 900 -L 'unit|bpf|integration' \
    "${ctest_args[@]}"
  # Each fuzz target runs VECFLOW_FUZZ_SECONDS (20 s) from its seed corpus; a crash, a leak or
  # a broken invariant fails its test and leaves the input in build-san/tests/fuzz/<target>/.
  unset ASAN_OPTIONS LSAN_OPTIONS UBSAN_OPTIONS ASAN_SYMBOLIZER_PATH
  stage "fuzz" ctest_run build-san -L fuzz
fi
report
echo "test.sh: all tests passed"
