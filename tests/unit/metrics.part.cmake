# The Prometheus endpoint (renderer, HTTP server on 127.0.0.1) and log levels by name.
target_sources(fedgate_unit_tests PRIVATE ${CMAKE_CURRENT_LIST_DIR}/test_metrics.cpp)
