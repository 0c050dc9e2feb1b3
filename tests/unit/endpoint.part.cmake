# The compute process's side of the connection handshake: the pure state machines, and two
# Endpoints talking through a fake gateway on 127.0.0.1 (plus fedgate-node listen/connect).
target_sources(fedgate_unit_tests PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/test_handshake.cpp
  ${CMAKE_CURRENT_LIST_DIR}/test_endpoint.cpp)
target_link_libraries(fedgate_unit_tests PRIVATE fedgate_endpoint fedgate_verbs_provider fedgate_node_cli)
# The verbs backend's cases only where it is built (FEDGATE_VERBS); without it the no-device cases
# expect the stand-in's "not built with RDMA".
target_compile_definitions(fedgate_unit_tests PRIVATE FEDGATE_VERBS=$<BOOL:${FEDGATE_VERBS}>)

# The same fake gateway as a program, for the Python module's tests.
add_executable(fedgate_fake_gateway ${CMAKE_SOURCE_DIR}/tests/support/fake_gateway_main.cpp)
target_include_directories(fedgate_fake_gateway PRIVATE ${PROJECT_SOURCE_DIR})
target_link_libraries(fedgate_fake_gateway PRIVATE fedgate_wire Threads::Threads)
