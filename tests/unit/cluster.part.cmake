# [cluster]: the store model, the election, the mappings in the store, the config section.
target_sources(fedgate_unit_tests PRIVATE ${CMAKE_CURRENT_LIST_DIR}/test_cluster.cpp)
