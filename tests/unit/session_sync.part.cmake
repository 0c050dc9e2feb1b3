# [cluster] sync: the NAT's session events, the datagram format, the mirror a member keeps.
target_sources(fedgate_unit_tests PRIVATE ${CMAKE_CURRENT_LIST_DIR}/test_session_sync.cpp)
