# The FedAvg example (examples/fedavg) through both gateways three ways: gRPC through a port map,
# gRPC through the sidecar by process ID, the Python module; 32 MiB models, identical checksums.
add_test(NAME integration_fedavg
  COMMAND ${CMAKE_CURRENT_LIST_DIR}/fedavg.sh ${CMAKE_BINARY_DIR})
set_tests_properties(integration_fedavg PROPERTIES LABELS integration TIMEOUT 1200 SKIP_RETURN_CODE 77
  RUN_SERIAL TRUE)
