# Unit tests for config, the neighbour table and idle backoff (no EAL). They need fedgate_control
# (config, toml++) and fedgate_dataplane (neighbour table), plus GTest::gtest_main.
target_sources(fedgate_unit_tests PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/test_config.cpp
  ${CMAKE_CURRENT_LIST_DIR}/test_neighbour.cpp
  ${CMAKE_CURRENT_LIST_DIR}/test_idle.cpp
  ${CMAKE_CURRENT_LIST_DIR}/test_service.cpp
  ${CMAKE_CURRENT_LIST_DIR}/test_session_table.cpp
  ${CMAKE_CURRENT_LIST_DIR}/test_nat.cpp
  ${CMAKE_CURRENT_LIST_DIR}/test_portmap_table.cpp)
