# fedgate-node expose/forward: unchanged gRPC programs of two parties joined by process ID through
# both gateways (tcp transport, automatic mappings only), both directions.
add_test(NAME integration_sidecar
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/sidecar.sh ${CMAKE_BINARY_DIR})
set_tests_properties(integration_sidecar PROPERTIES LABELS integration TIMEOUT 900 SKIP_RETURN_CODE 77
  RUN_SERIAL TRUE)
