# cmake/NnsFuzz.cmake: libFuzzer targets and their bounded ctest runs.
#
# libFuzzer needs clang's -fsanitize=fuzzer, so a fuzzer is built by a separate clang invocation from its sources,
# never by the project's (possibly g++) compiler. Each run in ctest is bounded and repeatable: a fixed seed and a
# fixed number of inputs, each limited in time and length, so a CI run tries the same inputs every time and a failure
# is a change's, not a new random draw's. New inputs go to a corpus folder in the build tree, never into the
# checked-in seeds. Longer, open-ended runs: the same binary with -max_total_time and no -runs.
#
#   nns_add_libfuzzer(NAME <target> TEST <ctest name> WHAT <words for the status line>
#                     SOURCES <files...> [DEPENDS <headers...>] [FLAGS <compiler flags...>] [LIBS <link flags...>]
#                     DICT <dictionary> SEEDS <seed folders...> RUNS <n> MAX_LEN <bytes>)
#
# Returns without a target, saying why, where clang++ or its fuzzer runtime is missing or NNS_BUILD_FUZZERS is OFF.
function(nns_add_libfuzzer)
  cmake_parse_arguments(PARSE_ARGV 0 F "" "NAME;TEST;WHAT;DICT;RUNS;MAX_LEN" "SOURCES;DEPENDS;FLAGS;LIBS;SEEDS")
  if(NOT NNS_BUILD_FUZZERS)
    message(STATUS "nccl-net-sdk: ${F_WHAT} not built: NNS_BUILD_FUZZERS is OFF (the same binary, whatever the build's flags, is built where it is ON)")
    return()
  endif()
  find_program(NNS_CLANGXX NAMES clang++-14 clang++)
  set(_runtime "")
  if(NNS_CLANGXX)
    execute_process(COMMAND ${NNS_CLANGXX} -print-file-name=libclang_rt.fuzzer-${CMAKE_SYSTEM_PROCESSOR}.a
      OUTPUT_VARIABLE _runtime OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  endif()
  if(NOT NNS_CLANGXX OR NOT EXISTS "${_runtime}")
    message(STATUS "nccl-net-sdk: ${F_WHAT} not built: clang++ with libclang_rt.fuzzer not found (apt-get install clang libclang-rt-14-dev)")
    return()
  endif()
  set(_bin ${CMAKE_CURRENT_BINARY_DIR}/${F_NAME}.bin)
  add_custom_command(OUTPUT ${_bin}
    COMMAND ${NNS_CLANGXX} -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
            ${F_FLAGS} ${F_SOURCES} ${F_LIBS} -o ${_bin}
    DEPENDS ${F_SOURCES} ${F_DEPENDS}
    COMMENT "Building ${F_NAME} with ${NNS_CLANGXX} -fsanitize=fuzzer"
    VERBATIM)
  add_custom_target(${F_NAME} ALL DEPENDS ${_bin})
  set(_corpus ${CMAKE_CURRENT_BINARY_DIR}/${F_NAME}_corpus)
  file(MAKE_DIRECTORY ${_corpus})
  add_test(NAME ${F_TEST}
    COMMAND ${_bin} -seed=1 -runs=${F_RUNS} -max_total_time=60 -timeout=10 -max_len=${F_MAX_LEN} -rss_limit_mb=1024
            -dict=${F_DICT} ${_corpus} ${F_SEEDS})
  set_tests_properties(${F_TEST} PROPERTIES TIMEOUT 90)
endfunction()
