# fedgatectl reload: the config diff (live changes and refusals) and the data plane's peer-table swap.
target_sources(fedgate_unit_tests PRIVATE ${CMAKE_CURRENT_LIST_DIR}/test_reload.cpp)
