# The layering check (tools/cmake/CheckLayers.cmake) on a tree made for the purpose: an include
# across the rule fails the check with its file:line, an include the rule allows does not, and
# the project's own tree passes under the project's rules. Run as cmake -P with CHECK (the
# checker), RULES (the project's) and SOURCE (userspace/).
cmake_minimum_required(VERSION 3.25)
set(tree ${WORK}/layering_tree)
file(REMOVE_RECURSE ${tree})
file(WRITE ${tree}/io/allowed.cc "#include \"core/packet.h\"\n#include <vector>\n")
file(WRITE ${tree}/io/across.h "// a header\n\n#include \"io/port.h\"\n#include \"pipeline/stage.h\"\n")

execute_process(COMMAND ${CMAKE_COMMAND} -DROOT=${tree} "-DRULES=io:pipeline,control:core,bpf"
                        -DSTAMP=${tree}/stamp -P ${CHECK}
                RESULT_VARIABLE r ERROR_VARIABLE err)
if(r EQUAL 0)
  message(FATAL_ERROR "an include of pipeline/ from io/ passed the check")
endif()
if(NOT err MATCHES "io/across.h:4: io may not include \"pipeline/stage.h\"")
  message(FATAL_ERROR "the check did not name the include and its line:\n${err}")
endif()
if(err MATCHES "allowed.cc")
  message(FATAL_ERROR "the check refused an include the rule allows:\n${err}")
endif()

execute_process(COMMAND ${CMAKE_COMMAND} -DROOT=${SOURCE} "-DRULES=${RULES}"
                        -DSTAMP=${tree}/stamp -P ${CHECK}
                RESULT_VARIABLE r ERROR_VARIABLE err)
if(NOT r EQUAL 0)
  message(FATAL_ERROR "the project's own tree breaks its layering:\n${err}")
endif()
file(REMOVE_RECURSE ${tree})
