# Resolution wire formats: IDs, records, message framing.
target_sources(fedgate_unit_tests PRIVATE ${CMAKE_CURRENT_LIST_DIR}/test_resolve_wire.cpp)
