# cmake -DINPUT=page.8 -DOUTPUT=page.8.gz -DVERSION=x.y.z -P gzip-man.cmake
# Fills in the version and compresses without a name or time stamp in the gzip header.
file(READ ${INPUT} text)
string(REPLACE "@VERSION@" "${VERSION}" text "${text}")
get_filename_component(dir ${OUTPUT} DIRECTORY)
get_filename_component(name ${INPUT} NAME)
file(MAKE_DIRECTORY ${dir})
file(WRITE ${dir}/${name} "${text}")
execute_process(COMMAND gzip -9nf ${dir}/${name} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "gzip ${dir}/${name} failed")
endif()
