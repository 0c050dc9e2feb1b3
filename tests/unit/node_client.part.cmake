# The node client library and the fedgate-node command line, against a fake gateway on 127.0.0.1.
target_sources(fedgate_unit_tests PRIVATE ${CMAKE_CURRENT_LIST_DIR}/test_node_client.cpp)
target_link_libraries(fedgate_unit_tests PRIVATE fedgate_node_client fedgate_node_cli)
