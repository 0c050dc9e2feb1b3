# fedgatectl capture on a running gateway, checked with tshark.
add_test(NAME integration_capture
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/capture.sh ${CMAKE_BINARY_DIR})
set_tests_properties(integration_capture PROPERTIES LABELS integration TIMEOUT 300 SKIP_RETURN_CODE 77
  RUN_SERIAL TRUE)
