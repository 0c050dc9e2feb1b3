# The gateway's side of the connection handshake: the relay between two gateways, and the
# automatic port mappings of the tcp transport against a real port-map table.
target_sources(fedgate_unit_tests PRIVATE ${CMAKE_CURRENT_LIST_DIR}/test_handshake_relay.cpp)
