# Not in a FEDGATE_VERBS=OFF build: no verbs backend, no probe (drivers/verbs.cmake).
if(NOT FEDGATE_VERBS)
  return()
endif()

# The verbs backend on a real RDMA device (two connections in one process, loopback GID); skips
# with exit 77 where no device exists, as on the build machines.
add_test(NAME integration_rdma_hw
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/rdma_hw.sh ${CMAKE_BINARY_DIR})
set_tests_properties(integration_rdma_hw PROPERTIES LABELS integration TIMEOUT 300 SKIP_RETURN_CODE 77)

# A real RDMA connection through both gateways, on soft-RoCE devices on the nodes' veths; skips
# with exit 77 where the kernel has no rdma_rxe, as on the build machines.
add_test(NAME integration_rdma_gateways
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/rdma_gateways.sh ${CMAKE_BINARY_DIR})
set_tests_properties(integration_rdma_gateways PROPERTIES LABELS integration TIMEOUT 600 SKIP_RETURN_CODE 77
  RUN_SERIAL TRUE)
