# The Prometheus endpoint ([metrics] listen) and run-time log levels (fedgatectl log) of a running gateway.
add_test(NAME integration_metrics
  COMMAND ${CMAKE_CURRENT_LIST_DIR}/metrics.sh ${CMAKE_BINARY_DIR})
set_tests_properties(integration_metrics PROPERTIES LABELS integration TIMEOUT 600 SKIP_RETURN_CODE 77
  RUN_SERIAL TRUE)
