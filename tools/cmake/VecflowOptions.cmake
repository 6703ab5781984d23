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

add_compile_options(-Wall -Wextra)
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
