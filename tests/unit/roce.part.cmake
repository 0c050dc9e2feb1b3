# RoCE v2 through the gateways: the ICRC (golden vectors, incremental update against full
# recomputation) and the translation table with its virtual QPN allocation.
target_sources(fedgate_unit_tests PRIVATE ${CMAKE_CURRENT_LIST_DIR}/test_roce.cpp)
