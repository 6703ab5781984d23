# BPF object -> skeleton -> linkable target, in one function.
#
#   vecflow_bpf_object(<name> <source.bpf.c> [INCLUDES dir...] [DEPENDS file...]
#                      [DEFINES macro...])
#
# compiles <source> with clang for the BPF target into <name>.bpf.o, generates <name>.skel.h
# with `bpftool gen skeleton`, and defines the INTERFACE target `bpf_<name>` whose include
# directory holds the skeleton. User space links that target and opens the program through
# the skeleton, so the object it loads is always the one built with it. The path of the object
# is exported as the property BPF_OBJECT of the target, for consumers that need the file
# itself (DPDK's net_af_xdp takes `xdp_prog=PATH`). Every object is recorded in the global
# property VECFLOW_BPF_OBJECTS, and appliance/ installs them all into VECFLOW_BPF_INSTALL_DIR
# (/usr/lib/vecflow/bpf in the package).

# Relative to the install prefix (/usr on an appliance).
set(VECFLOW_BPF_INSTALL_DIR lib/vecflow/bpf)

find_program(VECFLOW_BPF_CLANG NAMES clang clang-14)
if(NOT VECFLOW_BPF_CLANG)
  message(FATAL_ERROR "clang not found (needed to compile BPF programs): apt-get install clang")
endif()
find_program(VECFLOW_BPFTOOL NAMES bpftool PATHS /usr/sbin /sbin)
if(NOT VECFLOW_BPFTOOL)
  message(FATAL_ERROR "bpftool not found (needed for BPF skeletons): apt-get install bpftool")
endif()

# Debian keeps <asm/types.h> under the multiarch directory; clang -target bpf does not look
# there by itself.
execute_process(COMMAND ${CMAKE_C_COMPILER} -print-multiarch
                OUTPUT_VARIABLE VECFLOW_MULTIARCH OUTPUT_STRIP_TRAILING_WHITESPACE
                ERROR_QUIET)
if(NOT VECFLOW_MULTIARCH)
  set(VECFLOW_MULTIARCH x86_64-linux-gnu)
endif()

function(vecflow_bpf_object name source)
  cmake_parse_arguments(ARG "" "" "INCLUDES;DEPENDS;DEFINES" ${ARGN})
  get_filename_component(src ${source} ABSOLUTE)
  set(obj ${CMAKE_CURRENT_BINARY_DIR}/${name}.bpf.o)
  set(skel_dir ${CMAKE_CURRENT_BINARY_DIR}/skel)
  set(skel ${skel_dir}/${name}.skel.h)
  set(incs "")
  foreach(dir ${ARG_INCLUDES})
    get_filename_component(abs ${dir} ABSOLUTE)
    list(APPEND incs -I${abs})
  endforeach()
  set(defs "")
  foreach(def ${ARG_DEFINES})
    list(APPEND defs -D${def})
  endforeach()

  # Warnings fail the BPF build as they fail the C++ one (VECFLOW_WERROR; off in the package).
  # -mcpu=v3: atomics that return the old value (the offload gates of steer.bpf.c), which
  # kernels run since 5.12; Debian 12's is 6.1.
  set(werror "")
  if(VECFLOW_WERROR)
    set(werror -Werror)
  endif()
  add_custom_command(
    OUTPUT ${obj}
    COMMAND ${VECFLOW_BPF_CLANG} -target bpf -mcpu=v3 -O2 -g -Wall ${werror}
            -D__TARGET_ARCH_x86 ${defs} -I/usr/include/${VECFLOW_MULTIARCH} ${incs}
            -c ${src} -o ${obj}
    DEPENDS ${src} ${ARG_DEPENDS}
    IMPLICIT_DEPENDS C ${src}
    COMMENT "BPF ${name}.bpf.o"
    VERBATIM)
  add_custom_command(
    OUTPUT ${skel}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${skel_dir}
    COMMAND ${VECFLOW_BPFTOOL} gen skeleton ${obj} name ${name}_bpf > ${skel}
    DEPENDS ${obj}
    COMMENT "BPF skeleton ${name}.skel.h"
    VERBATIM)
  add_custom_target(bpf_${name}_gen DEPENDS ${skel})

  add_library(bpf_${name} INTERFACE)
  add_dependencies(bpf_${name} bpf_${name}_gen)
  target_include_directories(bpf_${name} INTERFACE ${skel_dir})
  target_link_libraries(bpf_${name} INTERFACE PkgConfig::LIBBPF)
  set_target_properties(bpf_${name} PROPERTIES BPF_OBJECT ${obj})
  set_property(GLOBAL APPEND PROPERTY VECFLOW_BPF_OBJECTS ${obj})
endfunction()
