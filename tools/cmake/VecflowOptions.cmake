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

option(VECFLOW_SANITIZE "Build with AddressSanitizer and UndefinedBehaviorSanitizer" OFF)
option(VECFLOW_WERROR "Treat warnings as errors" ON)
# The libFuzzer targets of tests/fuzz, in a configuration of their own: clang (19, for C++23)
# with coverage instrumentation and ASan+UBSan on every library, and only the fuzz targets
# among the tests.
option(VECFLOW_FUZZ "Build the libFuzzer targets (clang, ASan+UBSan, coverage)" OFF)

add_compile_options(-Wall -Wextra)
# The project's libraries are static and end up only in its executables, so thread-locals
# (DPDK's lcore id, read by every mempool get and put for its per-lcore cache) can use the
# initial-exec model; -fPIC alone would make each access a call to __tls_get_addr.
add_compile_options(-ftls-model=initial-exec)
if(VECFLOW_WERROR)
  add_compile_options(-Werror)
endif()

if(VECFLOW_SANITIZE)
  # Frame pointers keep ASan's stacks readable; recover=0 makes the first UB finding fatal,
  # so a sanitizer run cannot pass with a report buried in its log.
  add_compile_options(-fsanitize=address,undefined -fno-sanitize-recover=all
                      -fno-omit-frame-pointer)
  add_link_options(-fsanitize=address,undefined)
  add_compile_definitions(VECFLOW_SANITIZE=1)
endif()

if(VECFLOW_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang" OR CMAKE_CXX_COMPILER_VERSION VERSION_LESS 17)
    message(FATAL_ERROR "VECFLOW_FUZZ needs clang 17 or later with libFuzzer: "
                        "apt-get install clang-19 libclang-rt-19-dev and configure with "
                        "-DCMAKE_C_COMPILER=clang-19 -DCMAKE_CXX_COMPILER=clang++-19")
  endif()
  if(VECFLOW_SANITIZE)
    message(FATAL_ERROR "VECFLOW_FUZZ already builds with ASan+UBSan; leave VECFLOW_SANITIZE off")
  endif()
  # fuzzer-no-link instruments the libraries for coverage-guided search; only the fuzz targets
  # link libFuzzer's main (tests/fuzz). recover=0: a UB finding is a crash the fuzzer keeps.
  add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all
                      -fno-omit-frame-pointer)
  add_link_options(-fsanitize=address,undefined)
  add_compile_definitions(VECFLOW_SANITIZE=1)
  # clang flags the deprecated get_temporary_buffer inside libstdc++ 12's own std::stable_sort
  # when our code instantiates it: a warning about the system header, not about our code.
  add_compile_options(-Wno-error=deprecated-declarations)
endif()
