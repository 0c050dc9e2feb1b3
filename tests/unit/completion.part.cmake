# Bash completion (tools/bash_completion.cpp): the scripts name every command and option of the
# fedgatectl and fedgate-node tables; completion.sh completes lines in bash with the generated files.
target_sources(fedgate_unit_tests PRIVATE ${CMAKE_CURRENT_LIST_DIR}/test_completion.cpp)
target_link_libraries(fedgate_unit_tests PRIVATE fedgate_ctl_cli fedgate_node_cli fedgate_command_table)
add_test(NAME completion_bash COMMAND ${CMAKE_CURRENT_LIST_DIR}/completion.sh ${FEDGATE_COMPLETION_DIR})
set_tests_properties(completion_bash PROPERTIES LABELS unit TIMEOUT 60)
