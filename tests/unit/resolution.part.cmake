# Resolution service: cache, lcore resolver, rate limits, directory and announce stream.
target_sources(fedgate_unit_tests PRIVATE ${CMAKE_CURRENT_LIST_DIR}/test_resolution.cpp)
