# fedgate-node expose/forward (tools/sidecar.cpp): local TCP programs joined through two sidecars and
# the fake gateway on 127.0.0.1, bytes checked with SHA-256 (OpenSSL).
target_sources(fedgate_unit_tests PRIVATE ${CMAKE_CURRENT_LIST_DIR}/test_sidecar.cpp)
target_link_libraries(fedgate_unit_tests PRIVATE fedgate_node_cli fedgate_endpoint OpenSSL::Crypto)
