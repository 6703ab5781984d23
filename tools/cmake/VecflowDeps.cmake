# Finds every library the build needs. A missing one stops configuration with the Debian
# package that provides it, so a new machine is one `apt-get install` away from building.

find_package(PkgConfig)
if(NOT PKG_CONFIG_FOUND)
  message(FATAL_ERROR "pkg-config not found: apt-get install pkg-config")
endif()

# vecflow_require_pkg(<target-prefix> <pkg-config module> <Debian package>)
function(vecflow_require_pkg prefix module package)
  pkg_check_modules(${prefix} IMPORTED_TARGET GLOBAL ${module})
  if(NOT ${prefix}_FOUND)
    message(FATAL_ERROR "${module} not found by pkg-config: apt-get install ${package}")
  endif()
endfunction()

vecflow_require_pkg(DPDK "libdpdk>=22.11" dpdk-dev)
vecflow_require_pkg(LIBBPF "libbpf>=1.0" libbpf-dev)
vecflow_require_pkg(LIBXDP "libxdp>=1.2" libxdp-dev)
vecflow_require_pkg(LIBPCAP libpcap libpcap-dev)
vecflow_require_pkg(LIBSYSTEMD libsystemd libsystemd-dev)
vecflow_require_pkg(LIBMNL libmnl libmnl-dev)

# vecflow_require_package(<find_package name> <Debian package> [find_package args...])
macro(vecflow_require_package name package)
  find_package(${name} ${ARGN} QUIET)
  if(NOT ${name}_FOUND)
    message(FATAL_ERROR "${name} not found: apt-get install ${package}")
  endif()
endmacro()

vecflow_require_package(yaml-cpp libyaml-cpp-dev)
vecflow_require_package(fmt libfmt-dev)
vecflow_require_package(spdlog libspdlog-dev)
vecflow_require_package(nlohmann_json nlohmann-json3-dev)
vecflow_require_package(CLI11 libcli11-dev)
vecflow_require_package(Boost libboost-dev 1.74)
if(VECFLOW_TESTS)
  vecflow_require_package(GTest libgtest-dev)
  vecflow_require_package(benchmark libbenchmark-dev)
endif()
find_package(Threads REQUIRED)

