# The counter table: every row in the stats JSON and the Prometheus text, every reported key a row,
# workers summed exactly (hand-made snapshots; the EAL suite sums two real data planes).
target_sources(fedgate_unit_tests PRIVATE ${CMAKE_CURRENT_LIST_DIR}/test_counter_table.cpp)
