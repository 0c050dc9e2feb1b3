# RoCE v2 between two parties through both gateways: a handshake without a device, then scapy's RC
# packets translated both ways, drops by reason, translations gone with their processes.
add_test(NAME integration_roce
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/roce.sh ${CMAKE_BINARY_DIR})
set_tests_properties(integration_roce PROPERTIES LABELS integration TIMEOUT 600 SKIP_RETURN_CODE 77
  RUN_SERIAL TRUE)
