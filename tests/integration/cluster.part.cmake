# A party's two gateways on a three-member etcd ([cluster]): shared mappings, active/standby on the
# party's addresses, kill -9 of the active, an etcd member lost, quorum lost and back.
add_test(NAME integration_cluster
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/cluster.sh ${CMAKE_BINARY_DIR})
set_tests_properties(integration_cluster PROPERTIES LABELS integration TIMEOUT 600 SKIP_RETURN_CODE 77
  RUN_SERIAL TRUE)
