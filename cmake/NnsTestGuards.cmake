# A test judged by its output (PASS_REGULAR_EXPRESSION) has its exit status ignored by ctest: in a sanitizer build, a
# report printed after the expected line (LeakSanitizer at exit, a race in another rank's process) passed. There,
# each such test also fails on a sanitizer's report, except those whose plugins crash on purpose (their output holds
# ASan's report of that crash: the crash and full-run tests of the harness's broken plugins). Called at the end of
# each test directory (cmake_language(DEFER CALL nns_fail_on_sanitizer_reports) at its top, so that an early
# return() still reaches it).
function(nns_fail_on_sanitizer_reports)
  if(NOT NNS_SANITIZE)
    return()
  endif()
  set(_reports "ERROR: AddressSanitizer" "ERROR: LeakSanitizer" "runtime error: " "WARNING: ThreadSanitizer")
  get_property(_tests DIRECTORY PROPERTY TESTS)
  foreach(_test IN LISTS _tests)
    get_test_property(${_test} PASS_REGULAR_EXPRESSION _pass)
    if(NOT _pass OR _test MATCHES "crash|full_run_" OR _pass MATCHES "anitizer")
      continue()
    endif()
    get_test_property(${_test} FAIL_REGULAR_EXPRESSION _fail)
    if(NOT _fail)
      set(_fail "")
    endif()
    list(APPEND _fail ${_reports})
    set_tests_properties(${_test} PROPERTIES FAIL_REGULAR_EXPRESSION "${_fail}")
  endforeach()
endfunction()
