# Compiler settings shared by every target of the project.

set(CMAKE_CXX_STANDARD 23)
set(CMAKE_CXX_STANDARD_REQUIRED ON)
set(CMAKE_CXX_EXTENSIONS OFF)
set(CMAKE_C_STANDARD 11)
set(CMAKE_EXPORT_COMPILE_COMMANDS ON)
set(CMAKE_POSITION_INDEPENDENT_CODE ON)

if(NOT CMAKE_BUILD_TYPE AND NOT CMAKE_CONFIGURATION_TYPES)
  set(CMAKE_BUILD_TYPE RelWithDebInfo CACHE STRING "Build type" FORCE)
endif()

# The sanitizer build (tools/test.sh, a Debug build: -O0 compiles the template-heavy control
# plane in half the time -O1 takes, and the sanitizer tests are the short ones): ASan+UBSan on
# every target. With VECFLOW_FUZZ it also builds the libFuzzer targets of
# tests/fuzz: clang (17 or later, for C++23 and libFuzzer) then instruments every library for
# coverage, so one build serves the sanitizer tests and the fuzzing, and the libraries are not
# compiled a third time.
option(VECFLOW_SANITIZE "Build with AddressSanitizer and UndefinedBehaviorSanitizer" OFF)
option(VECFLOW_FUZZ "Also build the libFuzzer targets (clang 17+, implies VECFLOW_SANITIZE)" OFF)
option(VECFLOW_WERROR "Treat warnings as errors" ON)
# OFF builds only what the Debian package installs (vecflowd, vecflowctl, the BPF objects):
# the package build (debian/rules) does not compile the tests, benchmarks and test tools,
# nor needs their Build-Depends (GoogleTest, Google Benchmark).
option(VECFLOW_TESTS "Build the tests, benchmarks and test tools" ON)

add_compile_options(-Wall -Wextra)
# The project's libraries are static and end up only in its executables, so thread-locals
# (DPDK's lcore id, read by every mempool get and put for its per-lcore cache) can use the
# initial-exec model; -fPIC alone would make each access a call to __tls_get_addr.
add_compile_options(-ftls-model=initial-exec)
if(VECFLOW_WERROR)
  add_compile_options(-Werror)
endif()

# tools/test.sh builds userspace/ and tools/ as a unity build (CMAKE_UNITY_BUILD: up to 8
# sources of a target compiled as one), which halves the compile time of the libraries (their
# sources include the same heavy headers: fmt, nlohmann json, DPDK); tests/ stays one object per
# file (tests/CMakeLists.txt).
# There gcc takes a type of one source's anonymous namespace, used by a class of that source,
# for a header's (-Wsubobject-linkage is meant for headers): not a fault of a unity source.
if(CMAKE_UNITY_BUILD AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-Wno-subobject-linkage>)
endif()

if(VECFLOW_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang" OR CMAKE_CXX_COMPILER_VERSION VERSION_LESS 17)
    message(FATAL_ERROR "VECFLOW_FUZZ needs clang 17 or later with libFuzzer: "
                        "apt-get install clang-19 libclang-rt-19-dev and configure with "
                        "-DCMAKE_C_COMPILER=clang-19 -DCMAKE_CXX_COMPILER=clang++-19")
  endif()
  set(VECFLOW_SANITIZE ON CACHE BOOL "" FORCE)
  # fuzzer-no-link instruments the libraries for coverage-guided search; only the fuzz targets
  # link libFuzzer's main (tests/fuzz).
  add_compile_options(-fsanitize=fuzzer-no-link)
  # clang flags the deprecated get_temporary_buffer inside libstdc++ 12's own std::stable_sort
  # when our code instantiates it: a warning about the system header, not about our code.
  add_compile_options(-Wno-error=deprecated-declarations)
endif()

if(VECFLOW_SANITIZE)
  # Frame pointers keep ASan's stacks readable; recover=0 makes the first UB finding fatal,
  # so a sanitizer run cannot pass with a report buried in its log (and the fuzzer keeps it as
  # a crash).
  add_compile_options(-fsanitize=address,undefined -fno-sanitize-recover=all
                      -fno-omit-frame-pointer)
  add_link_options(-fsanitize=address,undefined)
  add_compile_definitions(VECFLOW_SANITIZE=1)
endif()
