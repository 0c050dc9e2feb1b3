# The Python module (client/python/) with pytest on Debian's python3, against the fake gateway
# program: tests/python/test_fedgate.py. Sanitizer builds preload the compiler's libasan, which an
# uninstrumented python3 must load before an instrumented extension, and libstdc++ right after it
# (python3 does not link it, and ASan's exception interceptor needs it there at start-up);
# detect_leaks=0, or Python's own allocations still held at exit would be reported as leaks.
if(TARGET fedgate_python)
  set(fedgate_python_env
    PYTHONPATH=$<TARGET_FILE_DIR:fedgate_python>
    FEDGATE_FAKE_GATEWAY=$<TARGET_FILE:fedgate_fake_gateway>
    PYTHONDONTWRITEBYTECODE=1)
  if(FEDGATE_SANITIZE)
    execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=libasan.so
      OUTPUT_VARIABLE fedgate_libasan OUTPUT_STRIP_TRAILING_WHITESPACE)
    execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=libstdc++.so
      OUTPUT_VARIABLE fedgate_libstdcxx OUTPUT_STRIP_TRAILING_WHITESPACE)
    list(APPEND fedgate_python_env "LD_PRELOAD=${fedgate_libasan}:${fedgate_libstdcxx}" ASAN_OPTIONS=detect_leaks=0)
  endif()
  add_test(NAME python_module
    COMMAND /usr/bin/python3 -m pytest -q -p no:cacheprovider ${CMAKE_CURRENT_LIST_DIR}/../python)
  set_tests_properties(python_module PROPERTIES LABELS unit TIMEOUT 300 SKIP_RETURN_CODE 77
    ENVIRONMENT "${fedgate_python_env}")
else()
  add_test(NAME python_module
    COMMAND sh -c "echo 'SKIP: no pybind11 (Debian package pybind11-dev), so no Python module to test'; exit 77")
  set_tests_properties(python_module PROPERTIES LABELS unit SKIP_RETURN_CODE 77)
endif()
