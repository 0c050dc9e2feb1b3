# A party's two gateways on a three-member etcd ([cluster]): shared mappings, active/standby on the
# party's addresses, kill -9 of the active, an etcd member lost, quorum lost and back.
add_test(NAME integration_cluster
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/cluster.sh ${CMAKE_BINARY_DIR})
set_tests_properties(integration_cluster PROPERTIES LABELS integration TIMEOUT 600 SKIP_RETURN_CODE 77
  RUN_SERIAL TRUE)

# The group's etcd client (EtcdStore, etcd's v3 gRPC API) against a real three-member etcd: every
# call, refusals and unavailability told apart, a member down, quorum lost and back.
add_executable(fedgate_etcd_store_tests integration/etcd_store_test.cpp)
target_include_directories(fedgate_etcd_store_tests PRIVATE ${PROJECT_SOURCE_DIR})
target_link_libraries(fedgate_etcd_store_tests PRIVATE fedgate_control GTest::gtest GTest::gtest_main)
add_test(NAME integration_etcd_store
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/etcd_store.sh ${CMAKE_BINARY_DIR})
set_tests_properties(integration_etcd_store PROPERTIES LABELS integration TIMEOUT 300 SKIP_RETURN_CODE 77
  RUN_SERIAL TRUE)
