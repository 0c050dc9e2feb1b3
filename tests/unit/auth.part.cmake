# Peer message authentication, the anti-replay window, the sequence clock, rate limiting.
target_sources(fedgate_unit_tests PRIVATE ${CMAKE_CURRENT_LIST_DIR}/test_peer_auth.cpp)
