# The verbs (rdma-core) backend of the connection layer; included by drivers/CMakeLists.txt.
find_library(IBVERBS ibverbs REQUIRED)
find_path(IBVERBS_INCLUDE infiniband/verbs.h REQUIRED)

add_library(fedgate_verbs STATIC ${CMAKE_CURRENT_LIST_DIR}/verbs_api.cpp ${CMAKE_CURRENT_LIST_DIR}/verbs.cpp)
target_include_directories(fedgate_verbs SYSTEM PUBLIC ${IBVERBS_INCLUDE})
target_link_libraries(fedgate_verbs PUBLIC ${IBVERBS} fedgate_client_static)

# Real-hardware checks (tests/integration/rdma_hw.sh): the probe says whether a device can be
# opened; the loopback runs two connections in one process over the device's own GID.
add_executable(fedgate_verbs_probe ${CMAKE_SOURCE_DIR}/tests/integration/verbs_probe.cpp)
target_link_libraries(fedgate_verbs_probe PRIVATE fedgate_verbs)
add_executable(fedgate_verbs_loopback ${CMAKE_SOURCE_DIR}/tests/integration/verbs_loopback.cpp)
target_link_libraries(fedgate_verbs_loopback PRIVATE fedgate_verbs Threads::Threads)
