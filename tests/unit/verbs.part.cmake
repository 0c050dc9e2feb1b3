# The verbs backend against FakeVerbs (no RDMA device needed); not in a FEDGATE_VERBS=OFF build.
if(NOT FEDGATE_VERBS)
  return()
endif()
target_sources(fedgate_unit_tests PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/test_verbs.cpp
  ${CMAKE_CURRENT_LIST_DIR}/../support/fake_verbs.cpp)
target_link_libraries(fedgate_unit_tests PRIVATE fedgate_verbs Threads::Threads)
