# The config reference against the parser: keys read out of controlplane/config.cpp, proven with
# parse_config, and checked against fedgated(8), the example config and the README.
target_sources(fedgate_unit_tests PRIVATE ${CMAKE_CURRENT_LIST_DIR}/test_reference.cpp)
