# The compute process's endpoint: the handshake state machines, the tcp backend, listen/connect
# over the gateway, the digest-checked stream the tools and tests move data with, and the
# handshake-only RDMA provider (no device, no data path).
add_library(fedgate_endpoint STATIC
  ${CMAKE_CURRENT_LIST_DIR}/handshake.cpp
  ${CMAKE_CURRENT_LIST_DIR}/tcp_backend.cpp
  ${CMAKE_CURRENT_LIST_DIR}/endpoint.cpp
  ${CMAKE_CURRENT_LIST_DIR}/digest_stream.cpp
  ${CMAKE_CURRENT_LIST_DIR}/handshake_only.cpp)
target_link_libraries(fedgate_endpoint PUBLIC fedgate_node_client fedgate_wire Threads::Threads PRIVATE OpenSSL::Crypto)

# The verbs backend as the endpoint's RdmaProvider (fedgate-node links it; the endpoint does not).
add_library(fedgate_verbs_provider STATIC ${CMAKE_CURRENT_LIST_DIR}/verbs_provider.cpp)
target_link_libraries(fedgate_verbs_provider PUBLIC fedgate_endpoint fedgate_verbs)
