# fedgatectl reload on running gateways: new mappings carry traffic, bad files are refused whole,
# log levels follow the file, a removed peer leaves status and resolution.
add_test(NAME integration_reload
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/reload.sh ${CMAKE_BINARY_DIR})
set_tests_properties(integration_reload PROPERTIES LABELS integration TIMEOUT 300 SKIP_RETURN_CODE 77
  RUN_SERIAL TRUE)
