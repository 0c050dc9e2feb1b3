# DPDK telemetry: JSON fitted to rte_tel_data, the /fedgate/ replies, and a real telemetry socket
# (librte_telemetry started alone, no EAL).
target_sources(fedgate_unit_tests PRIVATE ${CMAKE_CURRENT_LIST_DIR}/test_telemetry.cpp)
