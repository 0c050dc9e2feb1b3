# Connections between compute processes of two parties through both gateways (tcp backend).
add_test(NAME integration_connect
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/connect.sh ${CMAKE_BINARY_DIR})
set_tests_properties(integration_connect PROPERTIES LABELS integration TIMEOUT 900 SKIP_RETURN_CODE 77
  RUN_SERIAL TRUE)

# The client library built against its installed copy (pkg-config and find_package).
add_test(NAME client_install COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/client_install.sh ${CMAKE_BINARY_DIR})
set_tests_properties(client_install PROPERTIES LABELS integration TIMEOUT 300)
