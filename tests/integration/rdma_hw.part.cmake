# The verbs backend on a real RDMA device (two connections in one process, loopback GID); skips
# with exit 77 where no device exists, as on the build machines.
add_test(NAME integration_rdma_hw
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/rdma_hw.sh ${CMAKE_BINARY_DIR})
set_tests_properties(integration_rdma_hw PROPERTIES LABELS integration TIMEOUT 300 SKIP_RETURN_CODE 77)
