# Real-hardware checks of the verbs backend (tests/integration/rdma_hw.sh): the probe says whether a
# device can be opened; the loopback runs two connections in one process over the device's own GID.
add_executable(fedgate_verbs_probe ${CMAKE_SOURCE_DIR}/tests/integration/verbs_probe.cpp)
target_link_libraries(fedgate_verbs_probe PRIVATE fedgate_verbs)
add_executable(fedgate_verbs_loopback ${CMAKE_SOURCE_DIR}/tests/integration/verbs_loopback.cpp)
target_link_libraries(fedgate_verbs_loopback PRIVATE fedgate_verbs Threads::Threads)
