# The layering of userspace/: each part (a folder, included as "part/header.h") names the parts
# it builds on, and may include and link only those and what they build on in turn.
#
#   vecflow_layer(pipeline USES config hooks)   in userspace/CMakeLists.txt, one line per part
#   vecflow_check_layers()                      once, after the parts' add_subdirectory
#
# Every part shares the userspace/ include root, so the compiler cannot refuse an include
# across the rule by itself; the check does, twice: at configure time for the parts' link
# libraries, and at build time for their #include lines (a step of the default build that
# reruns when a file of userspace/ changes and fails with file:line and the rule broken).

# Declares `part` and the parts it uses directly. A part's CMake targets are vecflow_<part> and
# vecflow_<part>_<suffix> (vecflow_io_config); the include prefix is the folder name, except
# for the prefixes given with PREFIX (the BPF side's shared C headers: "vecflow/").
function(vecflow_layer part)
  cmake_parse_arguments(L "" "" "USES;PREFIX" ${ARGN})
  set_property(GLOBAL APPEND PROPERTY VECFLOW_LAYERS ${part})
  set_property(GLOBAL PROPERTY VECFLOW_LAYER_USES_${part} "${L_USES}")
  if(NOT L_PREFIX)
    set(L_PREFIX ${part})
  endif()
  set_property(GLOBAL PROPERTY VECFLOW_LAYER_PREFIX_${part} "${L_PREFIX}")
endfunction()

# The parts `part` may use: its USES and theirs, transitively.
function(_vecflow_layer_closure part out)
  set(seen "")
  set(todo ${part})
  while(todo)
    list(POP_FRONT todo p)
    get_property(uses GLOBAL PROPERTY VECFLOW_LAYER_USES_${p})
    foreach(u IN LISTS uses)
      if(NOT u IN_LIST seen)
        list(APPEND seen ${u})
        list(APPEND todo ${u})
      endif()
    endforeach()
  endwhile()
  set(${out} "${seen}" PARENT_SCOPE)
endfunction()

function(vecflow_check_layers)
  get_property(parts GLOBAL PROPERTY VECFLOW_LAYERS)
  set(rule_args "")
  set(all_prefixes "")
  foreach(part IN LISTS parts)
    get_property(prefixes GLOBAL PROPERTY VECFLOW_LAYER_PREFIX_${part})
    list(APPEND all_prefixes ${prefixes})
  endforeach()
  foreach(part IN LISTS parts)
    _vecflow_layer_closure(${part} allowed)
    if(NOT IS_DIRECTORY ${PROJECT_SOURCE_DIR}/userspace/${part})
      continue()  # a part outside userspace/ (the BPF side's headers) is used, not checked
    endif()
    # Link libraries: a vecflow_* library of this part links only the libraries of allowed parts.
    get_property(targets DIRECTORY ${PROJECT_SOURCE_DIR}/userspace/${part} PROPERTY BUILDSYSTEM_TARGETS)
    foreach(t IN LISTS targets)
      get_target_property(type ${t} TYPE)
      if(NOT type STREQUAL "STATIC_LIBRARY")
        continue()
      endif()
      get_target_property(libs ${t} LINK_LIBRARIES)
      foreach(lib IN LISTS libs)
        if(NOT lib MATCHES "^vecflow_([a-z]+)")
          continue()
        endif()
        set(other ${CMAKE_MATCH_1})
        if(NOT other STREQUAL part AND NOT other IN_LIST allowed)
          list(JOIN allowed " " allowed_text)
          message(FATAL_ERROR "layering: ${t} links ${lib}, but ${part} may use only: ${allowed_text} "
                              "(userspace/CMakeLists.txt, vecflow_layer(${part} ...))")
        endif()
      endforeach()
    endforeach()
    # Include prefixes this part may not use: every other part's that is not in its closure.
    set(denied "")
    foreach(other IN LISTS parts)
      if(NOT other STREQUAL part AND NOT other IN_LIST allowed)
        get_property(prefixes GLOBAL PROPERTY VECFLOW_LAYER_PREFIX_${other})
        list(APPEND denied ${prefixes})
      endif()
    endforeach()
    if(NOT denied)
      continue()  # the top: it may use every part
    endif()
    string(REPLACE ";" "," denied_arg "${denied}")
    string(REPLACE ";" "," allowed_arg "${allowed}")
    list(APPEND rule_args "${part}:${denied_arg}:${allowed_arg}")
  endforeach()

  file(GLOB_RECURSE sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/userspace/*.h
       ${PROJECT_SOURCE_DIR}/userspace/*.cc)
  set(stamp ${CMAKE_BINARY_DIR}/layering.stamp)
  string(REPLACE ";" "|" rules "${rule_args}")
  set(VECFLOW_LAYER_RULES "${rules}" CACHE INTERNAL "the rules CheckLayers.cmake takes")
  add_custom_command(
    OUTPUT ${stamp}
    COMMAND ${CMAKE_COMMAND} -DROOT=${PROJECT_SOURCE_DIR}/userspace "-DRULES=${rules}"
            -DSTAMP=${stamp} -P ${PROJECT_SOURCE_DIR}/tools/cmake/CheckLayers.cmake
    DEPENDS ${sources} ${PROJECT_SOURCE_DIR}/tools/cmake/CheckLayers.cmake
    COMMENT "Checking the includes of userspace/ against its layering"
    VERBATIM)
  add_custom_target(layering ALL DEPENDS ${stamp})
  # Each part's libraries wait for the check, so a build with an include across the rule stops
  # before it links anything.
  foreach(part IN LISTS parts)
    if(NOT IS_DIRECTORY ${PROJECT_SOURCE_DIR}/userspace/${part})
      continue()
    endif()
    get_property(targets DIRECTORY ${PROJECT_SOURCE_DIR}/userspace/${part} PROPERTY BUILDSYSTEM_TARGETS)
    foreach(t IN LISTS targets)
      get_target_property(type ${t} TYPE)
      if(type STREQUAL "STATIC_LIBRARY")
        add_dependencies(${t} layering)
      endif()
    endforeach()
  endforeach()
endfunction()
