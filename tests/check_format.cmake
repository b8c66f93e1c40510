# Fails when any C++ source differs from .clang-format's layout.
file(GLOB_RECURSE sources ${SOURCE_DIR}/config/*.[ch]pp ${SOURCE_DIR}/gateway/*.[ch]pp
     ${SOURCE_DIR}/limiters/*.[ch]pp ${SOURCE_DIR}/tests/*.[ch]pp ${SOURCE_DIR}/bench/*.[ch]pp
     ${SOURCE_DIR}/replay/*.[ch]pp)
find_program(CLANG_FORMAT NAMES clang-format clang-format-14 REQUIRED)
execute_process(COMMAND ${CLANG_FORMAT} --dry-run --Werror ${sources} RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "clang-format differences (run clang-format -i on these files):\n${err}")
endif()
